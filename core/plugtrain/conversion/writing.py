"""What a conversion says when its output cannot be written: a full disk or a closed folder.

Torch's writer and safetensors report a full disk in their own words ("unexpected pos",
``SafetensorError``); :func:`write_failure` finds the cause (an ``OSError`` in the chain, else
the free space of the folder) and says it in the user's terms. Torch-free.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from plugtrain.conversion.declaration import ConversionError
from plugtrain.errors import CheckpointError

__all__ = ["process_running", "remove_stale_partials", "write_converted", "write_failure"]

_CLOSED = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
           errno.EPERM: "permission denied"}  # fmt: skip


def _os_error(error: BaseException) -> OSError | None:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        current = current.__cause__ or current.__context__
    return None


def _free_bytes(path: Path) -> int | None:
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def write_failure(path: str | os.PathLike[str], error: BaseException) -> ConversionError:
    """The error to raise when writing ``path`` failed with ``error``.

    "no space left on <path>" for a full disk (``ENOSPC``, or a writer's own message while the
    folder has less than 64 KiB free); "cannot write <path>: read-only file system" and the
    like; else "cannot write <path>" with the writer's words.
    """
    path = Path(path)
    found = _os_error(error)
    code = found.errno if found is not None else None
    if code in (errno.ENOSPC, errno.EDQUOT) or (
        found is None and (_free_bytes(path) or 0) < 64 * 1024
    ):
        return ConversionError(f"no space left on {path}: nothing was written")
    if code in _CLOSED:
        return ConversionError(f"cannot write {path}: {_CLOSED[code]}")
    reason = found.strerror if found is not None and found.strerror else str(error)
    return ConversionError(f"cannot write {path}: {reason}")


_PARTIAL = r"\.partial-(\d+)-[0-9a-f]{8}"


def _partial_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")


def process_running(pid: int) -> bool:
    """Whether process ``pid`` still runs (this one included): its partial files are not stale."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(path: str | os.PathLike[str]) -> list[Path]:
    """Delete the hidden partial files of ``path`` that ended conversions left (a kill -9).

    Those of :func:`write_converted` (``.<name>.partial-<pid>-<hex>``, and the temporary a
    checkpoint save writes beside it); a running process's are kept.
    """
    path = Path(path)
    pattern = re.compile(r"\.?" + re.escape(f".{path.name}") + _PARTIAL + r"(\.[0-9a-zA-Z_]+)?\Z")
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    for entry in path.parent.iterdir():
        match = pattern.match(entry.name)
        if match and entry.is_file() and not process_running(int(match.group(1))):
            entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def write_converted(
    checkpoint: Path, config: Path, config_text: str, save: Callable[[Path], object]
) -> None:
    """Write a converted checkpoint (by ``save(path)``) and its model YAML, both or neither.

    Each is written under a hidden partial name and renamed into place at the end.

    :raises ConversionError: "no space left on <folder>" / "cannot write <path>", or another
        conversion wrote ``checkpoint`` meanwhile; nothing of this one is left behind.
    """
    written: list[Path] = []
    try:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        partial = _partial_name(checkpoint)
        written.append(partial)
        save(partial)
        text = _partial_name(config)
        written.append(text)
        text.write_text(config_text, encoding="utf-8")
        _refuse_taken(checkpoint, config)
        _place(partial, checkpoint)
        written[0] = checkpoint
        _place(text, config)
    except BaseException as exc:
        for made in written:
            with contextlib.suppress(OSError):
                made.unlink()
        if isinstance(exc, OSError | RuntimeError | CheckpointError):
            raise write_failure(checkpoint.parent, exc) from exc
        raise


def _place(partial: Path, final: Path) -> None:
    """Rename ``partial`` to ``final`` unless ``final`` exists (a hard link never replaces)."""
    try:
        os.link(partial, final)
    except FileExistsError:
        _refuse_taken(final)
    except OSError:  # a file system without hard links: the check above has to do
        os.rename(partial, final)
        return
    os.unlink(partial)


def _refuse_taken(*paths: Path) -> None:
    for path in paths:
        if path.exists():
            message = f"{path}: another conversion wrote it while this one ran; it is kept"
            raise ConversionError(message)
