"""Checkpoint files: written atomically, found by step, loaded without running pickled code.

A checkpoint is one file holding ``model``, ``optimizer`` (torch state dicts), ``schedulers``
(a list, in trainer order), ``global_step``, the RNG states and the data position needed to
continue bit-for-bit, and ``metadata`` (versions, the resolved configuration).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from plugtrain.errors import PlugtrainError

__all__ = ["CheckpointError", "find_latest", "load_checkpoint", "plain", "save_checkpoint"]


class CheckpointError(PlugtrainError, OSError):
    """A checkpoint cannot be written, found or read."""


def plain(value: Any) -> Any:
    """``value`` with YAML-located mappings and lists turned into plain ``dict`` and ``list``.

    Checkpoints are loaded with ``weights_only=True``, which accepts only plain containers.
    """
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically: temporary file, fsync, rename, fsync the folder.

    A crash at any moment leaves either the previous file or the complete new one.
    """
    path = Path(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(exc, OSError | RuntimeError) and not isinstance(exc, PlugtrainError):
            # A full disk surfaces as OSError from Python or RuntimeError from torch's writer.
            message = (
                f"{path}: cannot be written ({type(exc).__name__}: {exc}); "
                "the previous checkpoints are kept"
            )
            raise CheckpointError(message) from exc
        raise
    _fsync_directory(path.parent)
    return path


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # some file systems cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _name_pattern(checkpoint_name: str) -> re.Pattern[str]:
    before, _, after = checkpoint_name.partition("{step}")
    return re.compile(re.escape(before) + r"(\d+)" + re.escape(after) + r"\Z")


def find_latest(
    model_dir: str | Path, checkpoint_name: str = "checkpoint_{step}.mdl"
) -> Path | None:
    """The checkpoint in ``model_dir`` with the highest step, or ``None``."""
    directory = Path(model_dir)
    if not directory.is_dir():
        return None
    pattern = _name_pattern(checkpoint_name)
    best: tuple[int, Path] | None = None
    for entry in directory.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_file() and (best is None or int(match.group(1)) > best[0]):
            best = (int(match.group(1)), entry)
    return best[1] if best else None


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors and plain data only)."""
    path = Path(path)
    if not path.is_file():
        message = f"{path}: no such checkpoint file"
        raise CheckpointError(message)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        message = f"{path}: not a readable plugtrain checkpoint: {type(exc).__name__}: {exc}"
        raise CheckpointError(message) from exc
    if not isinstance(state, dict) or "model" not in state or "global_step" not in state:
        message = f"{path}: not a plugtrain checkpoint (no model state or global_step)"
        raise CheckpointError(message)
    return state
