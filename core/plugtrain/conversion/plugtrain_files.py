"""The model state of a plugtrain checkpoint file, memory-mapped (one tensor read at a time)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch

from plugtrain.conversion.declaration import ConversionError
from plugtrain.conversion.files import is_hf_checkpoint

__all__ = ["read_model_state", "read_started_from"]


def read_model_state(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The model's tensors in the plugtrain checkpoint (or plain state-dict file) at ``path``.

    :raises ConversionError: a folder (a DCP checkpoint, or Hugging Face's), or no model state.
    """
    path = Path(path)
    if path.is_dir():
        if is_hf_checkpoint(path):
            raise ConversionError(f"{path}: is a Hugging Face folder: convert it with --src-fmt hf")
        message = (
            f"{path}: is a folder (a DCP checkpoint): make it one file first with "
            f"'plugtrain checkpoint convert {path} FILE.mdl'"
        )
        raise ConversionError(message)
    if is_hf_checkpoint(path):
        raise ConversionError(f"{path}: is a Hugging Face file: convert it with --src-fmt hf")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except FileNotFoundError as exc:
        raise ConversionError(f"{path}: no such checkpoint file") from exc
    except Exception as exc:
        message = f"{path}: not a readable plugtrain checkpoint: {type(exc).__name__}: {exc}"
        raise ConversionError(message) from exc
    model = state.get("model", state) if isinstance(state, Mapping) else None
    if not isinstance(model, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in model.values()
    ):
        raise ConversionError(f"{path}: holds no model state (a mapping of tensors under 'model')")
    return dict(model)


def read_started_from(path: str | os.PathLike[str]) -> Path | None:
    """The folder of the starting point the checkpoint's run began from, if it is one.

    A fit records its starting point (``metadata.started_from``): a Hugging Face folder, or a
    file in one (``model.safetensors.index.json``); ``None`` for a file not holding it, or a
    starting point that is no longer there. Read after :func:`read_model_state` (which
    reports an unreadable file).
    """
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    metadata = state.get("metadata") if isinstance(state, Mapping) else None
    started = metadata.get("started_from") if isinstance(metadata, Mapping) else None
    if not isinstance(started, str):
        return None
    folder = Path(started)
    folder = folder if folder.is_dir() else folder.parent
    return folder if (folder / "config.json").is_file() else None
