"""Checkpoint files: written atomically, found by step, verified and loaded without running code.

A checkpoint is one file holding ``model``, ``optimizer`` (torch state dicts), ``schedulers``
(a list, in trainer order), ``global_step``, the RNG states and the data position needed to
continue bit-for-bit, and ``metadata`` (versions, the optimizer's class, the configuration).

Loading checks the file before trusting it: the zip archive's CRC-32 of every entry (a flipped
bit is found), and the structure (``model`` a mapping of tensors, ``global_step`` a count).
"""

from __future__ import annotations

import errno
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from plugtrain.errors import (
    CheckpointError,
    CorruptCheckpointError,
    PlugtrainError,
)
from plugtrain.train.checkpointing.run_folder import create_temporary

__all__ = [
    "checkpoint_step",
    "find_checkpoints",
    "find_latest",
    "load_checkpoint",
    "remove_stale_temporaries",
    "save_checkpoint",
    "verify_archive",
]


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically: temporary file, fsync, rename, fsync the folder.

    A crash at any moment leaves either the previous file or the complete new one (and perhaps
    a hidden ``.NAME.*`` temporary, removed by the next ``fit``).
    """
    path = Path(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = create_temporary(path)
        os.close(descriptor)
        _write(state, temporary)
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


def _write(state: dict[str, Any], temporary: Path) -> None:
    """``torch.save`` into ``temporary`` and fsync it.

    By its name first: torch then writes from C++, about twice as fast as through a Python file.
    That writer reports a failed write (a full disk) without its cause, so a failure is retried
    through a Python file, which either succeeds or raises the ``OSError`` that names it.
    """
    try:
        torch.save(state, str(temporary))
    except RuntimeError:
        with open(temporary, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
    with open(temporary, "rb") as handle:
        os.fsync(handle.fileno())


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


def _name_pattern(checkpoint_name: str) -> str:
    before, _, after = checkpoint_name.partition("{step}")
    return re.escape(before) + r"(\d+)" + re.escape(after)


def find_checkpoints(
    model_dir: str | Path, checkpoint_name: str = "checkpoint_{step}.mdl"
) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint file in ``model_dir``, the newest first."""
    directory = Path(model_dir)
    if not directory.is_dir():
        return []
    pattern = re.compile(_name_pattern(checkpoint_name) + r"\Z")
    found = []
    for entry in directory.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_file():
            found.append((int(match.group(1)), entry))
    return sorted(found, key=lambda item: item[0], reverse=True)


def checkpoint_step(file_name: str, checkpoint_name: str = "checkpoint_{step}.mdl") -> int | None:
    """The step of a checkpoint file named after ``checkpoint_name``, else ``None``."""
    match = re.fullmatch(_name_pattern(checkpoint_name), file_name)
    return int(match.group(1)) if match else None


def find_latest(
    model_dir: str | Path, checkpoint_name: str = "checkpoint_{step}.mdl"
) -> Path | None:
    """The checkpoint in ``model_dir`` with the highest step, or ``None``."""
    found = find_checkpoints(model_dir, checkpoint_name)
    return found[0][1] if found else None


def remove_stale_temporaries(
    model_dir: str | Path, checkpoint_name: str = "checkpoint_{step}.mdl"
) -> list[Path]:
    """Delete the hidden temporaries that interrupted saves left; returns what was deleted.

    Only safe while this process holds the model directory's lock (no other save is running).
    """
    directory = Path(model_dir)
    if not directory.is_dir():
        return []
    pattern = re.compile(r"\." + _name_pattern(checkpoint_name) + r"\.[0-9a-zA-Z_]+\Z")
    removed = []
    for entry in directory.iterdir():
        if pattern.match(entry.name) and entry.is_file():
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def verify_archive(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is a complete zip archive whose every entry matches its CRC-32.

    :raises CorruptCheckpointError: naming what is wrong (empty, truncated, a damaged entry).
    """
    path = Path(path)
    unreadable = f"{path}: not a readable plugtrain checkpoint:"
    size = path.stat().st_size
    if size == 0:
        raise CorruptCheckpointError(f"{unreadable} the file is empty")
    if not zipfile.is_zipfile(path):
        message = f"{unreadable} not a complete zip archive ({size} bytes; truncated?)"
        raise CorruptCheckpointError(message)
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.EIO, errno.EACCES):
            raise CheckpointError(f"{path}: cannot be read: {exc}") from exc
        message = f"{unreadable} a damaged zip archive ({type(exc).__name__}: {exc})"
        raise CorruptCheckpointError(message) from exc
    if damaged is not None:
        message = f"{unreadable} the entry {damaged} does not match its CRC-32 checksum"
        raise CorruptCheckpointError(message)


def _check_structure(path: Path, state: Any) -> None:
    if not isinstance(state, dict) or "model" not in state:
        message = f"{path}: not a plugtrain checkpoint (no model state)"
        raise CorruptCheckpointError(message)
    model = state["model"]
    if not isinstance(model, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in model.values()
    ):
        raise CorruptCheckpointError(f"{path}: 'model' is not a mapping of tensors")
    step = state.get("global_step", 0)  # absent: a weights-only checkpoint
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CorruptCheckpointError(f"{path}: 'global_step' is not a step count: {step!r}")
    optimizer = state.get("optimizer")
    if optimizer is not None and not (
        isinstance(optimizer, Mapping) and {"state", "param_groups"} <= optimizer.keys()
    ):
        raise CorruptCheckpointError(f"{path}: 'optimizer' is not an optimizer state dict")
    if not isinstance(state.get("schedulers") or [], list):
        raise CorruptCheckpointError(f"{path}: 'schedulers' is not a list")


def _refuse_hf_file(path: Path) -> None:
    from plugtrain.conversion.files import is_hf_checkpoint

    if is_hf_checkpoint(path) or path.suffix == ".safetensors":
        message = (
            f"{path}: is a Hugging Face weights file, not a plugtrain checkpoint: a run's "
            "ckpt_path may name its folder (with config.json), or convert it with 'plugtrain "
            "checkpoint convert FILE --src-fmt hf --tgt-fmt plugtrain --config config.json'"
        )
        raise CheckpointError(message)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Verify and read a checkpoint written by :func:`save_checkpoint` (tensors and plain data).

    :raises CorruptCheckpointError: the file is damaged or not a plugtrain checkpoint.
    :raises CheckpointError: it does not exist or cannot be read.
    """
    path = Path(path)
    if not path.is_file():
        message = f"{path}: no such checkpoint file"
        raise CheckpointError(message)
    _refuse_hf_file(path)
    verify_archive(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        message = f"{path}: not a readable plugtrain checkpoint: {type(exc).__name__}: {exc}"
        # sound or not, no run can resume from it: resuming falls back to an older checkpoint
        raise CorruptCheckpointError(message) from exc
    _check_structure(path, state)
    return state  # type: ignore[no-any-return]
