"""Whether a run file's ``ckpt_path`` values name checkpoints that exist (torch-free).

``plugtrain check`` refuses a ``fit`` or ``validate`` ``ckpt_path`` that names nothing, at its
line, as it refuses a data loader's missing ``data_dir``: otherwise the mistake shows only when
the run starts. A path under the ``model_dir`` or ``checkpoint_root`` of a trainer that runs
before it in the same file (its own ``fit`` too, for ``validate``) may not exist yet and is
accepted; so is a URL (``s3://``, written on CS-X).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableSequence
from typing import Any

from plugtrain.config.validation.checker import Checker, Path

__all__ = ["check_checkpoint_paths"]


def _folders_written_by(init: Mapping[str, Any]) -> list[str]:
    """The folders a trainer with this ``init`` writes checkpoints into (absolute)."""
    folders = [init.get("model_dir") or "./model_dir"]
    checkpoint = init.get("checkpoint")
    if isinstance(checkpoint, Mapping) and isinstance(checkpoint.get("checkpoint_root"), str):
        folders.append(checkpoint["checkpoint_root"])
    return [os.path.abspath(f) for f in folders if isinstance(f, str) and f.strip()]


def _is_under(path: str, folders: list[str]) -> bool:
    target = os.path.abspath(path)
    return any(os.path.commonpath([target, folder]) == folder for folder in folders)


def _missing(value: Any, written_before: list[str]) -> bool:
    if not isinstance(value, str) or not value.strip() or "\0" in value or "://" in value:
        return False  # blank, NUL and URL values have their own rules
    return not os.path.exists(value) and not _is_under(value, written_before)


def check_checkpoint_paths(
    checker: Checker, entry: Mapping[str, Any], path: Path, written: MutableSequence[str]
) -> None:
    """Add a problem for each ``fit``/``validate`` ``ckpt_path`` of ``entry`` naming nothing.

    :param written: the folders earlier trainers of the file write checkpoints into; this
        trainer's are appended.
    """
    own = _folders_written_by(entry["init"])
    for section, folders in (("fit", list(written)), ("validate", [*written, *own])):
        part = entry.get(section)
        if not isinstance(part, Mapping) or not _missing(part.get("ckpt_path"), folders):
            continue
        value = part["ckpt_path"]
        relative = "" if os.path.isabs(value) else f", relative to {os.getcwd()}"
        message = (
            f"no checkpoint at {value} (no such file or folder{relative}); name an existing "
            "checkpoint, or leave ckpt_path unset to start from the newest in model_dir"
        )
        checker.add((*path, section, "ckpt_path"), message, part, "ckpt_path")
    written.extend(own)
