"""Files in the run folder: room checked before work starts, and new hidden temporaries."""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

__all__ = ["create_temporary", "reserve"]


def reserve(descriptor: int, size: int, directory: Path) -> None:
    """Make sure ``size`` bytes can be written: allocate them (then the probe is deleted)."""
    if size <= 0:
        return
    try:
        os.posix_fallocate(descriptor, 0, size)
    except AttributeError:  # no posix_fallocate on this platform: compare with the free space
        pass
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    else:
        return
    stats = os.statvfs(directory)
    if stats.f_bavail * stats.f_frsize < size:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def create_temporary(path: Path) -> tuple[int, Path]:
    """A new hidden ``.NAME.XXXXXXXX`` next to ``path``, created with the umask's permissions.

    (``tempfile.mkstemp`` would make it 0600 whatever the umask; the metrics files follow it.)
    """
    while True:
        candidate = path.parent / f".{path.name}.{secrets.token_hex(4)}"
        try:
            return os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), candidate
        except FileExistsError:
            continue
