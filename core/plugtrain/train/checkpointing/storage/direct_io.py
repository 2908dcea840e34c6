"""DCP shard files written with ``O_DIRECT``: past the page cache, for a fraction of the CPU.

A buffered write copies every byte into the kernel's page cache, and on a virtual machine
filling fresh cache pages is slow: writing 186 MiB costs about 0.7 s of CPU here, while the
same bytes written with ``O_DIRECT`` from an aligned buffer cost about 0.02 s (and 0.13 s of
wall time). For a background save that CPU is taken from training.

:class:`DirectFileSystemWriter` is DCP's ``FileSystemWriter`` with one change: the files it
creates are :class:`DirectFile` streams. The bytes, offsets and lengths DCP records are the
same as with a plain file, so the checkpoint is an ordinary DCP checkpoint (``FileSystemReader``
and ``dcp_to_torch_save`` read it). Where ``O_DIRECT`` is not available (not Linux, some file
systems) the file is an ordinary buffered one.
"""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemWriter

__all__ = ["DirectFile", "DirectFileSystem", "DirectFileSystemWriter"]

BLOCK = 4096
"""Alignment of ``O_DIRECT`` writes: memory address, file offset and length (a page, which
covers every logical block size in use)."""

CHUNK = 8 << 20
"""Bytes gathered in the aligned buffer before each write."""

O_DIRECT: int = getattr(os, "O_DIRECT", 0)


class DirectFile(io.RawIOBase):
    """A write-only file that writes through a page-aligned buffer with ``O_DIRECT``.

    Bytes are gathered in an anonymous ``mmap`` of :data:`CHUNK` bytes (page-aligned) and
    written a whole buffer at a time. :meth:`close` writes the rest padded to :data:`BLOCK`,
    cuts the file back to its true length and, with ``sync``, calls ``fsync``. Writes the file
    system refuses with ``EINVAL`` (no ``O_DIRECT`` support) continue buffered.

    :raises OSError: the file cannot be opened with ``O_DIRECT`` (the caller opens a plain one).
    """

    def __init__(self, path: str | os.PathLike[str], sync: bool = True) -> None:
        super().__init__()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(path, flags | O_DIRECT, 0o644)
        self._direct = True
        self._sync = sync
        self._buffer = mmap.mmap(-1, CHUNK)
        self._view = memoryview(self._buffer)
        self._filled = 0
        self._written = 0

    def writable(self) -> bool:
        """``True``."""
        return True

    def fileno(self) -> int:
        """The file descriptor (``fsync`` on it before :meth:`close` is allowed, and cheap)."""
        return self._fd

    def tell(self) -> int:
        """Bytes written so far (DCP records each item's offset and length with it)."""
        return self._written + self._filled

    def write(self, data: Any) -> int:
        """Take all of ``data`` (any buffer); returns its length in bytes."""
        filled = self._filled
        try:
            size = len(data)
            if filled + size < CHUNK:  # the usual case: a small piece that fits
                self._view[filled : filled + size] = data
                self._filled = filled + size
                return size
        except (TypeError, ValueError):  # a buffer of items wider than a byte
            pass
        view = memoryview(data).cast("B")
        size = len(view)
        start = 0
        while start < size:
            take = min(CHUNK - self._filled, size - start)
            self._view[self._filled : self._filled + take] = view[start : start + take]
            self._filled += take
            start += take
            if self._filled == CHUNK:
                self._write_out(CHUNK)
                self._filled = 0
        return size

    def flush(self) -> None:
        """Nothing: a partial block cannot be written before the end."""

    def close(self) -> None:
        """Write what is left, set the true length, ``fsync`` (with ``sync``) and close."""
        if self.closed:
            return
        try:
            tail = self._filled
            if tail:
                length = self._written + tail
                padded = -(-tail // BLOCK) * BLOCK if self._direct else tail
                self._view[tail:padded] = bytes(padded - tail)
                self._write_out(padded)
                os.ftruncate(self._fd, length)
                self._written = length
                self._filled = 0
            if self._sync:
                os.fsync(self._fd)
        finally:
            self._release()
            super().close()

    def abort(self) -> None:
        """Close without writing what is left (after a failed write)."""
        if not self.closed:
            self._release()
            super().close()

    def _write_out(self, count: int) -> None:
        done = 0
        while done < count:
            try:
                done += os.write(self._fd, self._view[done:count])
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self._direct:
                    raise
                import fcntl  # only here: O_DIRECT exists on Linux alone

                flags = fcntl.fcntl(self._fd, fcntl.F_GETFL)
                fcntl.fcntl(self._fd, fcntl.F_SETFL, flags & ~O_DIRECT)
                self._direct = False
        self._written += count

    def _release(self) -> None:
        self._view.release()
        self._buffer.close()
        os.close(self._fd)


class DirectFileSystem(FileSystem):
    """DCP's local file system, creating files for writing as :class:`DirectFile` streams."""

    def __init__(self, sync: bool = True) -> None:
        super().__init__()
        self.sync = sync

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
        """A :class:`DirectFile` for ``"wb"`` where ``O_DIRECT`` works; else a plain file."""
        stream = None
        if mode == "wb" and O_DIRECT:
            with contextlib.suppress(OSError):
                stream = DirectFile(path, sync=self.sync)
        if stream is None:
            with Path(path).open(mode) as plain:
                yield plain
            return
        try:
            yield stream
        except BaseException:
            stream.abort()
            raise
        stream.close()


class DirectFileSystemWriter(FileSystemWriter):
    """DCP's ``FileSystemWriter`` writing its files with ``O_DIRECT`` (see the module)."""

    def __init__(self, path: str | os.PathLike[str], **options: Any) -> None:
        super().__init__(path, **options)
        self.fs = DirectFileSystem(sync=self.sync_files)
