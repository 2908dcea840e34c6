"""Argument schemas of the two GPT HDF5 data processors (torch-free, h5py-free).

The keys and defaults are Model Zoo 2.10's. ``check`` reports a
``data_dir`` that does not exist at its line, as Model Zoo's validation does ("Path X does not
exist."), relative to the working directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_models.data.vocabulary import data_vocabulary

__all__ = [
    "IterableProcessorArgs",
    "MapProcessorArgs",
    "data_dirs",
    "parse_subset",
    "transform_problems",
]

FEATURES = ("input_ids", "attention_mask", "labels")
"""The rows of Model Zoo's sample format, in order."""

VSL_FEATURES = ("attention_span", "position_ids")
"""Rows 3 and 4 of a VSL sample."""

TRANSFORMS: dict[str, dict[str, Any]] = {
    "add_sink_tokens": {
        "sink_token_id": 0,
        "num_sink_tokens": 1,
        "sink_token_start_pos": 0,
        "truncate_to_original_length": False,
    },
}
"""Each supported ``data_transforms`` item (``name``) with its keys and defaults."""

DEPRECATED = "deprecated in Model Zoo and ignored there too"


def data_dirs(value: str | list[str]) -> list[str]:
    """``data_dir`` as a list of folders."""
    return [value] if isinstance(value, str) else list(value)


def _path_problems(value: Any) -> Iterator[Problem]:
    if value is None:
        return
    for folder in data_dirs(value):
        if not os.path.exists(folder):
            yield about("data_dir", f"Path {folder} does not exist.")
        elif not os.path.isdir(folder):
            yield about("data_dir", f"Path {folder} is not a folder of .h5 files.")


def transform_problems(transforms: Any) -> Iterator[Problem]:
    """What is wrong with a ``data_transforms`` list (names, keys, values)."""
    if transforms is None:
        return
    for index, item in enumerate(transforms):
        where = f"data_transforms[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            yield about("data_transforms", f"{where}: each transform is {{name: ..., keys...}}")
            continue
        known = TRANSFORMS.get(item["name"])
        if known is None:
            message = (
                f"{where}: transform {item['name']!r} is not supported "
                f"(supported: {', '.join(TRANSFORMS)})"
            )
            yield about("data_transforms", message)
            continue
        for key, value in item.items():
            if key == "name":
                continue
            if key not in known:
                message = f"{where}: unknown key {key!r} of {item['name']} ({', '.join(known)})"
                yield about("data_transforms", message)
            elif type(value) is not type(known[key]) or (isinstance(value, int) and value < 0):
                kind = type(known[key]).__name__
                yield about("data_transforms", f"{where}.{key}: must be a {kind} >= 0")
        if item.get("num_sink_tokens", 1) == 0:
            yield about("data_transforms", f"{where}.num_sink_tokens: must be >= 1")


def parse_subset(text: str) -> list[tuple[float, float]]:
    """``"0.0-0.5,0.7-1.0"`` as ``[(0.0, 0.5), (0.7, 1.0)]``: fractions of the sample range.

    :raises ValueError: a part is not ``START-END`` with 0 <= START <= END <= 1, or the parts
        are not in increasing order without overlap (Model Zoo's rules).
    """
    parts: list[tuple[float, float]] = []
    for part in text.strip().split(","):
        bounds = part.strip().split("-")
        try:
            start, end = (float(b) for b in bounds)
        except ValueError:
            message = f"data_subset part {part.strip()!r} is not START-END (fractions)"
            raise ValueError(message) from None
        if not 0.0 <= start <= end <= 1.0:
            message = f"data_subset part {part.strip()!r} needs 0 <= START <= END <= 1"
            raise ValueError(message)
        if parts and start < parts[-1][1]:
            message = f"data_subset parts must increase without overlap, got {text!r}"
            raise ValueError(message)
        parts.append((start, end))
    return parts


def _subset_problem(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        parse_subset(text)
    except ValueError as exc:
        return str(exc)
    return None


@attrs.frozen
class MapProcessorArgs:
    """Model Zoo's GptHDF5MapDataProcessor: map-style reading of GPT HDF5 files.

    ``batch_size`` is the global batch; in a data-parallel run of W processes, rank r takes rows
    [r·B/W, (r+1)·B/W) of every batch, so the data order does not depend on W. With
    ``shuffle``, epoch e is ``torch.randperm(N)`` seeded with ``shuffle_seed + e``; with
    ``drop_last``, an incomplete last batch is carried into the next epoch.
    """

    data_vocabulary = staticmethod(data_vocabulary)
    """The ``vocab_size`` its ``data_params.json`` records (``plugtrain check`` compares it)."""

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "vocab_size": DEPRECATED,
        "repeat": DEPRECATED + " (the Trainer repeats the data)",
        "use_worker_cache": "Cerebras appliance only (caches files on worker nodes)",
    }

    batch_size: int = arg(help="sequences per step over all processes (the global batch)", gt=0)
    data_dir: str | list[str] | None = arg(
        None, help="folder(s) of *.h5 files; several are pooled (exactly one of data_dir, mixture)"
    )
    mixture: list[dict[str, Any]] | None = arg(
        None, help="[{data_dir, weight, data_subset}]: weighted data sets (not supported yet)"
    )
    shuffle: bool = arg(False, help="permute the samples each epoch")
    shuffle_seed: int = arg(0, help="epoch e's permutation is seeded with shuffle_seed + e", ge=0)
    max_sequence_length: int | None = arg(
        None,
        help="only for corpus files (a rank-1 token stream): sequence length; sample files "
        "carry their own",
        gt=0,
    )
    data_subset: str | None = arg(
        None, help="fractions of the sample range to use, e.g. '0.0-0.5,0.7-1.0'"
    )
    num_samples: int | None = arg(
        None, help="samples per epoch (more than the data set: it repeats; fewer: a part)", gt=0
    )
    drop_last: bool = arg(
        True, help="carry an incomplete last batch into the next epoch instead of yielding it"
    )
    pad_last: bool = arg(
        False,
        help="pad a short last batch to batch_size with zero rows (loss mask 0); only with "
        "drop_last false",
    )
    sort_files: bool = arg(True, help="order the files by path (false: as the folder lists them)")
    use_vsl: bool = arg(False, help="also read attention_span and position_ids (files of 5 rows)")
    num_workers: int = arg(0, help="DataLoader worker processes", ge=0)
    prefetch_factor: int | None = arg(10, help="batches each worker loads ahead", gt=0)
    persistent_workers: bool = arg(True, help="keep the workers between epochs")
    dataset_map_fn: Any = arg(None, help="a per-sample function (Python only; not supported)")
    data_transforms: list[dict[str, Any]] | None = arg(
        None, help="batch transforms, each {name: add_sink_tokens, ...}"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """One data source that exists, a valid subset and transforms, no unsupported keys."""
        if (arguments["data_dir"] is None) == (arguments["mixture"] is None):
            yield about(("data_dir", "mixture"), "give exactly one of data_dir and mixture")
        if arguments["mixture"] is not None:
            yield about("mixture", "mixture is not supported yet: give data_dir")
        if arguments["dataset_map_fn"] is not None:
            yield about("dataset_map_fn", "dataset_map_fn is not supported (it takes Python code)")
        problem = _subset_problem(arguments["data_subset"])
        if problem is not None:
            yield about("data_subset", problem)
        yield from transform_problems(arguments["data_transforms"])
        if arguments["data_transforms"] and arguments["use_vsl"]:
            yield about(("data_transforms", "use_vsl"), "data_transforms do not take use_vsl")
        yield from _path_problems(arguments["data_dir"])


@attrs.frozen
class IterableProcessorArgs:
    """Model Zoo's GptHDF5DataProcessor: streaming GPT HDF5 files in file order.

    In a data-parallel run of W processes, rank r reads files[r::W] with batch_size / W
    sequences per batch. With ``shuffle``, the rank's files are shuffled and the samples pass
    through a buffer of ``shuffle_buffer`` samples (Python ``random`` seeded with
    ``shuffle_seed``, plus the worker id with workers).
    """

    data_vocabulary = staticmethod(data_vocabulary)
    """The ``vocab_size`` its ``data_params.json`` records (``plugtrain check`` compares it)."""

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "max_sequence_length": "the files carry their sequence length (Model Zoo warns too)",
        "vocab_size": DEPRECATED,
        "repeat": DEPRECATED + " (the Trainer repeats the data)",
        "use_multiple_workers": DEPRECATED,
    }

    data_dir: str | list[str] = arg(help="folder(s) of *.h5 files; several are pooled")
    batch_size: int = arg(help="sequences per step over all processes (the global batch)", gt=0)
    shuffle: bool = arg(help="shuffle the files and the samples (required, as in Model Zoo)")
    shuffle_seed: int | None = arg(
        None, help="seed of the shuffling (null: 0, so that runs repeat)", ge=0
    )
    shuffle_buffer: int | None = arg(
        None, help="samples in the shuffle buffer (null: 10 x batch_size)", gt=0
    )
    num_workers: int = arg(
        0, help="DataLoader worker processes (each reads a part of each file)", ge=0
    )
    prefetch_factor: int | None = arg(10, help="batches each worker loads ahead", gt=0)
    persistent_workers: bool = arg(True, help="keep the workers between epochs")
    drop_last: bool = arg(True, help="drop each reader's incomplete last batch")
    use_vsl: bool = arg(False, help="also read attention_span and position_ids (files of 5 rows)")
    features_list: list[str] = arg(
        list(FEATURES),
        help="names of the rows of each sample; data_params.json's features replace them when "
        "data_dir is one folder (a string), and use_vsl the five VSL names (as in Model Zoo)",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The folders exist."""
        yield from _path_problems(arguments["data_dir"])
