"""Where the C kernels' library is built and which cached library may be loaded.

A library is loaded only from a folder this user owns that no group or other user can write,
only when the file is this user's, not writable by others, and its bytes match the SHA-256
recorded beside it (``NAME.sha256``) when it was built. A cache folder that fails this (another
user's, shared, read-only or impossible to create) is not used: the library is built into a
private temporary folder instead (the reason is logged once), which is removed as soon as the
library is loaded (a loaded library needs no file).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = [
    "cache_folder",
    "digest_file",
    "record_digest",
    "remove_private_folders",
    "untrusted_library",
]

_log = logging.getLogger("plugtrain")
_private: list[Path] = []
_warned: set[str] = set()


def _unsafe(path: Path, what: str) -> str | None:
    """Why ``path`` (a folder or file) could have been written by someone else, if it could."""
    info = path.stat()
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"{what} {path} is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.filemode(info.st_mode)
        return f"{what} {path} can be written by its group or other users ({mode})"
    return None


def _private_folder(why: str) -> Path:
    if why not in _warned:
        _warned.add(why)
        _log.warning(
            "plugtrain optimizers: building the C kernels in a private temporary folder: %s", why
        )
    folder = Path(tempfile.mkdtemp(prefix="plugtrain-kernels-"))
    _private.append(folder)
    return folder


def cache_folder(preferred: Path) -> Path:
    """``preferred`` when this user alone can write it (created so), else a private folder."""
    try:
        preferred.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _unsafe(preferred.resolve(), "the kernel cache")
    except OSError as exc:
        return _private_folder(f"the kernel cache {preferred} cannot be made ({exc.strerror})")
    if why is not None:
        return _private_folder(why)
    try:
        probe = tempfile.NamedTemporaryFile(dir=preferred, prefix=".probe-")  # noqa: SIM115
        probe.close()
    except OSError as exc:
        return _private_folder(f"the kernel cache {preferred} cannot be written ({exc.strerror})")
    return preferred


def digest_file(library: Path) -> Path:
    """Where the SHA-256 of ``library`` is recorded."""
    return library.with_name(library.name + ".sha256")


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digest(library: Path, name: str) -> None:
    """Record the SHA-256 of the just built ``library`` as the digest of ``name`` beside it.

    The library is made writable by this user only first (a linker follows the umask).
    """
    os.chmod(library, 0o755)
    target = digest_file(library.with_name(name))
    scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    scratch.write_text(_digest(library) + "\n", encoding="ascii")
    os.replace(scratch, target)


def untrusted_library(library: Path) -> str | None:
    """Why the cached ``library`` must not be loaded (``None``: it is the one this user built)."""
    try:
        why = _unsafe(library, "the kernel library") or _unsafe(digest_file(library), "its digest")
        recorded = digest_file(library).read_text(encoding="ascii").strip()
        found = _digest(library)
    except OSError as exc:
        return f"{library} cannot be checked ({exc.strerror})"
    if why is not None:
        return why
    if recorded != found:
        return f"{library} is not the library built here (its SHA-256 differs from the record)"
    return None


def remove_private_folders() -> None:
    """Delete the private temporary folders libraries were built in (once loaded or failed)."""
    while _private:
        shutil.rmtree(_private.pop(), ignore_errors=True)
