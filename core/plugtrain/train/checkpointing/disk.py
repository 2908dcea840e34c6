"""Checking that a folder has room before work starts."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["reserve"]


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
