"""What a backend needs to know about the processes ``plugtrain fit`` launches (torch-free).

``plugtrain fit RUN.yaml`` asks each trainer's backend class how many processes it wants on this
machine, ``processes_per_node(arguments)`` of :class:`plugtrain.protocols.Backend`. Above one,
it starts them with PyTorch's elastic launcher (torchrun), which gives each process the
variables ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`launched_process` reads them. A
backend whose process teardown is known to crash calls :func:`exit_after_atexit_handlers`, and
the command line ends the process right after its ``atexit`` handlers
(:func:`exit_worker_when_done`).

This module is part of the plugin API (``docs/plugin-api.md``): the CPU and GPU backends of
``plugtrain-backends`` use it, and a third party's backend can do exactly what they do.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import attrs

from plugtrain.errors import BackendError

__all__ = [
    "LaunchedProcess",
    "exit_after_atexit_handlers",
    "exit_worker_when_done",
    "is_main_rank",
    "launched_process",
]

log = logging.getLogger("plugtrain")


@attrs.frozen
class LaunchedProcess:
    """Where a process started by torchrun (or a compatible launcher) stands.

    :param rank: global rank.
    :param local_rank: rank on this machine.
    :param world_size: number of processes in the run.
    """

    rank: int
    local_rank: int
    world_size: int


def launched_process(environ: Mapping[str, str] | None = None) -> LaunchedProcess | None:
    """The ranks of this process from torchrun's variables, or ``None`` when nobody launched it."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    try:
        rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", rank))
    except ValueError:
        message = (
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers, got "
            f"{environ.get('RANK')!r}, {environ.get('WORLD_SIZE')!r}, "
            f"{environ.get('LOCAL_RANK')!r}"
        )
        raise BackendError(message) from None
    return LaunchedProcess(rank=rank, local_rank=local_rank, world_size=world_size)


def is_main_rank() -> bool:
    """Whether this process is rank 0 (or not launched at all): the one that prints results."""
    launched = launched_process()
    return launched is None or launched.rank == 0


_exit_reason: str | None = None


def exit_after_atexit_handlers(reason: str) -> None:
    """Ask ``plugtrain fit`` to end this process once its work is done and atexit handlers ran.

    For a backend whose teardown is known to crash the interpreter's own shutdown: the process
    then skips only what comes after the ``atexit`` handlers (module and C++ teardown). Called by
    the gloo process group of ``plugtrain-backends`` when it leaves, on the torch versions that
    need it.

    :param reason: why, for the debug log.
    """
    global _exit_reason  # noqa: PLW0603 - one process, one way to end it
    _exit_reason = reason


@contextmanager
def exit_worker_when_done() -> Iterator[None]:
    """End the process right after the block succeeds, when a backend asked for it.

    Only after :func:`exit_after_atexit_handlers` was called (otherwise the process ends as
    usual): output is flushed, every ``atexit`` handler runs, logging is shut down, and the
    process exits with status 0 without the interpreter's teardown. Errors leave through the
    normal path, except a stop on a signal
    (:class:`~plugtrain.train.interrupt.TrainingInterrupted`) in a launched run of several
    processes: rank 0 prints where it saved, and every worker exits ``128 + signal`` the same
    way, after its ``atexit`` handlers.
    """
    launched = launched_process()
    several = launched is not None and launched.world_size > 1
    try:
        yield
    except KeyboardInterrupt as exc:
        status = getattr(exc, "exit_status", None)
        if not several or status is None:
            raise
        if launched is not None and launched.rank == 0:
            sys.stderr.write(f"plugtrain: {exc}\n")
        _exit_now(int(status))
    if _exit_reason is None:
        return
    log.debug("ending the process after its atexit handlers: %s", _exit_reason)
    _exit_now(0)


def _exit_now(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
