"""``plugtrain checkpoint convert`` between formats: the files in and out, named as Model Zoo does.

``<source stem>_to_plugtrain.mdl`` and ``<config stem>_to_plugtrain.yaml`` from a Hugging Face
checkpoint; ``<checkpoint stem>_to_hf/`` (with its ``config.json``) from a plugtrain one. A stem
is the name without every trailing alphabetic extension (``model.safetensors.index.json`` ->
``model``), as Model Zoo strips it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from plugtrain.conversion.declaration import FORMATS, ConversionError

__all__ = [
    "EXPORT_FORMATS",
    "HF_WEIGHT_FILES",
    "check_formats",
    "data_tokenizer_folder",
    "hf_config_file",
    "hf_source_file",
    "hf_sub_models",
    "hf_weight_files",
    "is_hf_checkpoint",
    "model_section",
    "output_stem",
    "tokenizer_folder",
]

HF_WEIGHT_FILES = (
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
)
"""The weight files of a Hugging Face folder, in the order they are looked for."""


def _own_model(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(
        (folder / n).exists() for n in HF_WEIGHT_FILES
    )


def hf_sub_models(folder: str | os.PathLike[str]) -> list[Path]:
    """The sub-models of a folder of Hugging Face models, sorted.

    Each is a sub-folder with its ``config.json`` and weights (DPR's ``question_encoder/`` and
    ``ctx_encoder/``); none when ``folder`` holds weights of its own or is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir() or any((folder / n).exists() for n in HF_WEIGHT_FILES):
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and _own_model(p))


def hf_config_file(folder: str | os.PathLike[str]) -> Path:
    """The ``config.json`` of a Hugging Face folder (of its first sub-model when it has none)."""
    folder = Path(folder)
    parts = hf_sub_models(folder)
    if not (folder / "config.json").exists() and parts:
        return parts[0] / "config.json"
    return folder / "config.json"


def is_hf_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Hugging Face folder, index, or safetensors file (not plugtrain's).

    A folder of sub-models (:func:`hf_sub_models`) is one too.
    """
    path = Path(path)
    if path.is_dir():
        return _own_model(path) or bool(hf_sub_models(path))
    if path.name.endswith(".index.json") or path.suffix == ".safetensors":
        return path.is_file()
    return path.is_file() and path.name.startswith("pytorch_model") and path.suffix == ".bin"


def hf_weight_files(path: str | os.PathLike[str]) -> list[Path]:
    """The weight files behind ``path`` (a folder, an index or one file), in order.

    A folder of sub-models gives every sub-model's files, the sub-folders in sorted order.

    :raises ConversionError: nothing to read, or an index naming a shard that is not there.
    """
    path = Path(path)
    parts = hf_sub_models(path)
    if parts:
        return [file for part in parts for file in hf_weight_files(part)]
    if path.is_dir():
        found = next((path / n for n in HF_WEIGHT_FILES if (path / n).is_file()), None)
        if found is None:
            names = ", ".join(HF_WEIGHT_FILES)
            raise ConversionError(f"{path}: no Hugging Face weights here (looked for {names})")
        path = found
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    if not path.name.endswith(".index.json"):
        return [path]
    shards = sorted({path.parent / name for name in _shard_names(path)})
    absent = [s.name for s in shards if not s.is_file()]
    if absent:
        raise ConversionError(f"{path}: names shards that are not there: {', '.join(absent)}")
    return shards


def _shard_names(index_file: Path) -> set[str]:
    """The shard file names an ``*.index.json`` names, each checked to be a plain file name.

    :raises ConversionError: not JSON, no ``weight_map`` mapping, or an entry that is not a
        string or names a file outside the index's folder (naming the entry).
    """
    try:
        index = json.loads(index_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConversionError(f"{index_file}: not a Hugging Face shard index ({exc})") from exc
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        kind = "missing" if weight_map is None else f"a {type(weight_map).__name__}"
        message = (
            f"{index_file}: not a Hugging Face shard index: 'weight_map' is {kind}, "
            "not a mapping of tensor names to shard file names"
        )
        raise ConversionError(message)
    names = set()
    for tensor, name in weight_map.items():
        if not isinstance(name, str):
            message = (
                f"{index_file}: weight_map entry {tensor!r} is {name!r}, "
                "not a shard file name (a string)"
            )
            raise ConversionError(message)
        if not _is_plain_file_name(name):
            message = (
                f"{index_file}: weight_map entry {tensor!r} names {name!r}, which is not a "
                "file name inside the index's folder; shards are read only from that folder"
            )
            raise ConversionError(message)
        names.add(name)
    return names


def _is_plain_file_name(name: str) -> bool:
    """Whether ``name`` is one file's name, with no folder part (``../x``, ``/x``, ``C:x``)."""
    return (
        bool(name)
        and name not in (".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and ":" not in name
    )


_CS_FORMAT = re.compile(r"^cs-(\d+\.\d+|auto|current)$")


EXPORT_FORMATS = ("hf-peft",)
"""Formats a plugtrain checkpoint is exported to but never read from: ``hf-peft``, the adapters
of a run file's callback that declares ``export_adapter`` (LoRA), in PEFT's files and names."""


def check_formats(source: str, target: str) -> tuple[str, str]:
    """The two formats, checked: ``hf`` and ``plugtrain``, one each way (or ``hf-peft`` out).

    :raises ConversionError: a Model Zoo ``cs-X.Y`` format (its container needs
        ``cerebras.pytorch``), an unknown one, or the same format twice.
    """
    for given in (source, target):
        if _CS_FORMAT.match(given):
            message = (
                f"format {given!r} is a Cerebras Model Zoo checkpoint: its .mdl container needs "
                "cerebras.pytorch, which is not available here. plugtrain reads and writes its own "
                "checkpoint files, whose parameter names are Model Zoo's: use 'plugtrain'"
            )
            raise ConversionError(message)
        known = (*FORMATS, *EXPORT_FORMATS) if given == target else FORMATS
        if given not in known:
            names = ", ".join((*FORMATS, *EXPORT_FORMATS))
            raise ConversionError(f"unknown format {given!r} (formats: {names})")
    if target in EXPORT_FORMATS and source != "plugtrain":
        raise ConversionError(f"--tgt-fmt {target} needs --src-fmt plugtrain")
    if source == target:
        raise ConversionError(f"--src-fmt and --tgt-fmt are both {source!r}")
    return source, target


def output_stem(path: str | os.PathLike[str]) -> str:
    """The name of ``path`` without every trailing alphabetic extension."""
    name = Path(path).name
    while True:
        stem, dot, extension = name.rpartition(".")
        if not dot or not stem or not extension.isalpha():
            return name
        name = stem


def hf_source_file(path: str | os.PathLike[str]) -> Path:
    """The weights file of a Hugging Face source (a folder's own, or ``path`` itself)."""
    path = Path(path)
    if hf_sub_models(path):
        return path
    if path.is_dir():
        for name in HF_WEIGHT_FILES:
            if (path / name).is_file():
                return path / name
        raise ConversionError(
            f"{path}: no Hugging Face weights here ({', '.join(HF_WEIGHT_FILES)})"
        )
    if not path.exists():
        raise ConversionError(f"{path}: no such file")
    return path


def model_section(
    config: str | os.PathLike[str],
) -> tuple[str | None, dict[str, Any], Mapping[str, Any]]:
    """``(name, keys, whole file)`` of a run file's or model YAML's model mapping.

    Read from a top-level ``model:`` (Model Zoo's legacy layout and what ``convert`` writes) or
    ``trainer.init.model``; a list of trainers must hold one.

    :raises ConversionError: naming the file and what it lacks.
    """
    path = Path(config)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConversionError(f"{path}: cannot be read as YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ConversionError(f"{path}: not a mapping of sections")
    model = data.get("model")
    trainer = data.get("trainer")
    if model is None and trainer is not None:
        if isinstance(trainer, list):
            if len(trainer) != 1:
                message = f"{path}: holds {len(trainer)} trainers; convert needs the one model"
                raise ConversionError(message)
            trainer = trainer[0].get("trainer", trainer[0])
        model = ((trainer or {}).get("init") or {}).get("model")
    if not isinstance(model, Mapping):
        raise ConversionError(f"{path}: has no model section (model: or trainer.init.model:)")
    keys = dict(model)
    name = keys.pop("name", None) or keys.pop("model_name", None)
    return name, keys, data


_TOKENIZER_KEYS = ("pretrained_model_name_or_path", "huggingface_tokenizer", "tokenizer_dir",
                   "tokenizer", "tokenizer_file_path")  # fmt: skip


def data_tokenizer_folder(data: Any, base: Path) -> Path | None:
    """The tokenizer folder a data folder the run file names was written with, if any.

    ``plugtrain preprocess`` records it in the folder's ``data_params.json``
    (``processing.huggingface_tokenizer``); a relative path is taken as written, else beside
    the data folder.
    """
    for value in _values_of(data, "data_dir"):
        folder = Path(value) if Path(value).is_absolute() else base / value
        try:
            params = json.loads((folder / "data_params.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        processing = params.get("processing") if isinstance(params, Mapping) else None
        spec = processing.get("huggingface_tokenizer") if isinstance(processing, Mapping) else None
        if not isinstance(spec, str):
            continue
        for candidate in (Path(spec), folder / spec):
            if (candidate / "tokenizer.json").is_file() or (
                candidate / "tokenizer.model"
            ).is_file():
                return candidate
    return None


def _values_of(data: Any, key: str) -> list[str]:
    """Every string (or string in a list) under ``key`` anywhere in ``data``."""
    found: list[str] = []
    if isinstance(data, Mapping):
        for name, value in data.items():
            if name == key and isinstance(value, str):
                found.append(value)
            elif name == key and isinstance(value, list):
                found += [v for v in value if isinstance(v, str)]
            else:
                found += _values_of(value, key)
    elif isinstance(data, list):
        for item in data:
            found += _values_of(item, key)
    return found


def tokenizer_folder(data: Any, base: Path) -> Path | None:
    """A local tokenizer folder (one with ``tokenizer.json``) the run file names, if any."""
    if isinstance(data, Mapping):
        for key, value in data.items():
            if key in _TOKENIZER_KEYS and isinstance(value, str):
                candidate = Path(value)
                candidate = candidate if candidate.is_absolute() else base / candidate
                folder = candidate if candidate.is_dir() else candidate.parent
                if (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file():
                    return folder
            found = tokenizer_folder(value, base)
            if found is not None:
                return found
    elif isinstance(data, list):
        for item in data:
            found = tokenizer_folder(item, base)
            if found is not None:
                return found
    return None
