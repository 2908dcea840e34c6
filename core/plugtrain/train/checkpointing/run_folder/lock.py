"""One ``fit`` per model directory: an exclusive lock held for the length of the fit.

The lock is ``fcntl.flock`` on ``MODEL_DIR/.plugtrain.lock``, which holds the pid, host and start
time of its holder. The kernel releases it when the holder dies, however it dies, so a lock left
by a killed process is taken over (with a warning naming that process); a live holder makes a
second ``fit`` fail at once with a message naming its pid.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from plugtrain.errors import ModelDirBusyError

__all__ = ["LOCK_NAME", "ModelDirBusyError", "ModelDirLock", "run_locks"]

log = logging.getLogger("plugtrain")

LOCK_NAME = ".plugtrain.lock"
"""The lock file's name inside the model directory."""

_UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


def _describe(holder: dict[str, object]) -> str:
    pid = holder.get("pid", "unknown")
    host = holder.get("host")
    since = holder.get("started")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    when = f", started {since}" if since else ""
    return f"pid {pid}{where}{when}"


def _read_holder(descriptor: int) -> dict[str, object]:
    try:
        text = os.pread(descriptor, 4096, 0).decode("utf-8", "replace").strip()
    except OSError:
        return {}
    if not text:
        return {}
    try:
        holder = json.loads(text)
    except ValueError:
        return {"pid": text[:40]}
    return holder if isinstance(holder, dict) else {}


class ModelDirLock:
    """Exclusive use of ``directory`` while the ``with`` block runs.

    :param directory: the model directory (it must exist).
    :param label: what the directory is to the run, in messages (``checkpoint_root``).
    :raises ModelDirBusyError: on entering, when a live process holds the lock.
    """

    def __init__(self, directory: str | os.PathLike[str], label: str = "model_dir") -> None:
        self.path = Path(directory) / LOCK_NAME
        self.label = label
        self._descriptor: int | None = None

    def __enter__(self) -> ModelDirLock:
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in _UNSUPPORTED:
                os.close(descriptor)
                log.warning(
                    "%s: this file system cannot lock files (%s); nothing stops another fit "
                    "from using the same model_dir",
                    self.path.parent,
                    exc.strerror,
                )
                return self
            holder = _read_holder(descriptor)
            os.close(descriptor)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            message = (
                f"{self.label} {self.path.parent} is in use by another fit "
                f"({_describe(holder)}); wait for it to end, or give this run another {self.label}"
            )
            raise ModelDirBusyError(message) from None
        stale = _read_holder(descriptor)
        if stale:
            log.warning(
                "%s %s: taking over the lock of %s, which ended without releasing it",
                self.label,
                self.path.parent,
                _describe(stale),
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, (json.dumps(me) + "\n").encode(), 0)
        self._descriptor = descriptor
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            os.ftruncate(descriptor, 0)  # an empty file: released cleanly, nothing to take over
        finally:
            os.close(descriptor)  # closing the descriptor releases the flock


def run_locks(
    model_dir: Path, checkpoint_dir: Path, is_main_process: bool = True
) -> contextlib.AbstractContextManager[object]:
    """The locks a fit holds: ``model_dir``'s, and ``checkpoint_root``'s when it is elsewhere.

    Only the main process locks (it is the one writing).
    """
    stack = contextlib.ExitStack()
    if not is_main_process:
        return stack
    stack.enter_context(ModelDirLock(model_dir))
    if os.path.realpath(checkpoint_dir) != os.path.realpath(model_dir):
        try:
            stack.enter_context(ModelDirLock(checkpoint_dir, "checkpoint_root"))
        except BaseException:
            stack.close()
            raise
    return stack
