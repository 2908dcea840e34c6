"""What the encoders' data sections share: the loading keys and the path checks (torch-free)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_models.encoder_data.paths import path_problems

__all__ = [
    "DEPRECATED",
    "NO_BUFFER",
    "LoadingArgs",
    "bucket_problems",
    "file_problems",
    "folder_problems",
]

DEPRECATED = "deprecated in Model Zoo and ignored there too"
NO_BUFFER = (
    "this loader reads by index: with shuffle, each epoch is one permutation of all its samples "
    "(seeded with shuffle_seed + epoch), which needs no buffer"
)


def folder_problems(arguments: Mapping[str, Any], *keys: str) -> Iterator[Problem]:
    """Each of ``keys`` names folders that exist."""
    for key in keys:
        yield from path_problems(key, arguments.get(key), folder=True)


def file_problems(arguments: Mapping[str, Any], *keys: str) -> Iterator[Problem]:
    """Each of ``keys`` names a file that exists (when given)."""
    for key in keys:
        yield from path_problems(key, arguments.get(key), folder=False)


def bucket_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """``buckets`` (sequence-length bucketing for Cerebras systems) is not supported."""
    if arguments.get("buckets") is not None:
        yield about("buckets", "buckets (length bucketing) is not supported: leave it null")


@attrs.frozen
class LoadingArgs:
    """The keys every encoder data processor has: the global batch and how it is loaded.

    ``batch_size`` is the global batch: in a data-parallel run of W processes, rank r takes
    rows [r·B/W, (r+1)·B/W) of every global batch, so the samples of a step do not depend on
    W. Random draws (order, masks, noise spans) are seeded with ``shuffle_seed`` (null: 0),
    so that runs repeat and a resumed run sees what an uninterrupted one saw.
    """

    batch_size: int = arg(help="samples per step over all processes (the global batch)", gt=0)
    shuffle: bool = arg(True, help="shuffle the samples each epoch")
    shuffle_seed: int | None = arg(
        None, help="seed of the order and of the loader's random draws (null: 0)", ge=0
    )
    num_workers: int = arg(0, help="DataLoader worker processes", ge=0)
    prefetch_factor: int | None = arg(10, help="batches each worker loads ahead", gt=0)
    persistent_workers: bool = arg(True, help="keep the workers between epochs")
    drop_last: bool = arg(True, help="drop an incomplete last batch of each epoch")
