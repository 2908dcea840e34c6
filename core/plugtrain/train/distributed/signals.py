"""Stopping ``fit`` gracefully on SIGINT (Ctrl-C), SIGTERM (preemption) and SIGHUP (hang-up).

Cluster schedulers (Slurm, Kubernetes) send SIGTERM before they kill a job; a closed terminal
sends SIGHUP. Each of them asks the loop to stop after the current step, save it, and raise
:class:`TrainingInterrupted`, whose exit status is ``128 + signal number`` (130, 143, 129), as a
shell reports a process ended by that signal.

In a run of several processes the ranks agree on the step to stop at, in a small all-reduce
about every 0.1 s (every step when steps are slower), and all of them save and stop together.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "STOP_SIGNALS",
    "InterruptRequest",
    "StoppedAtOnce",
    "TrainingInterrupted",
    "also_stop_on",
    "is_distributed",
    "signal_name",
]

AGREE_EVERY_S = 0.1
"""In a distributed run, the ranks agree on whether to stop about this often (and at least every
step that takes longer): a collective per step would slow small models down by a third."""

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop ``fit`` after the current step."""

_ALSO_STOP_ON: list[int] = []


@contextmanager
def also_stop_on(signal_number: int) -> Iterator[None]:
    """While the block runs, ``signal_number`` stops ``fit`` too (SLURM's requeue signal)."""
    _ALSO_STOP_ON.append(int(signal_number))
    try:
        yield
    finally:
        _ALSO_STOP_ON.remove(int(signal_number))


def signal_name(signal_number: int) -> str:
    """``"SIGTERM"`` for 15: the name of a signal number."""
    try:
        return signal.Signals(signal_number).name
    except ValueError:
        return f"signal {signal_number}"


class TrainingInterrupted(KeyboardInterrupt):
    """``fit`` stopped on a signal after finishing the step and saving a checkpoint.

    It is a ``KeyboardInterrupt``, so code that does not expect it still stops; the message says
    where the checkpoint is. Fitting again with the same settings resumes from it exactly.

    :param message: what happened and where the checkpoint is.
    :param signal_number: the signal that asked to stop (SIGINT by default).
    """

    def __init__(self, message: str, signal_number: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signal_number = int(signal_number)

    @property
    def exit_status(self) -> int:
        """``128 + signal number``: what the command line exits with."""
        return 128 + self.signal_number


class StoppedAtOnce(KeyboardInterrupt):
    """A second stop signal in a single process: ``fit`` stops at once, saving nothing more.

    :param message: which signal came again.
    :param signal_number: that signal.
    """

    def __init__(self, message: str, signal_number: int) -> None:
        super().__init__(message)
        self.signal_number = int(signal_number)

    @property
    def exit_status(self) -> int:
        """``128 + signal number``: what the command line exits with."""
        return 128 + self.signal_number


def is_distributed() -> bool:
    """Whether several processes train together (they must agree on stopping)."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


class InterruptRequest:
    """During ``fit``, SIGINT, SIGTERM and SIGHUP ask the loop to stop after the current step.

    Installed on the main thread only; a signal that is ignored (``nohup`` ignores SIGHUP) stays
    ignored, and the previous handlers are restored afterwards. In a single process a second
    signal stops at once (:class:`StoppedAtOnce`), except while a checkpoint is written
    (:meth:`saving`): a torn save would lose the step the first signal asked to keep, so the
    repeat is noted and the save finishes. With several processes repeated signals are only
    noted: the launcher forwards what a scheduler may also have sent each process, and it ends
    workers that do not stop within its shutdown timeout itself.
    """

    def __init__(self) -> None:
        self.signal_number: int | None = None
        self._previous: dict[int, Any] = {}
        self._distributed = False
        self._steps = 0
        self._interval = 1
        self._since = time.monotonic()
        self._saving = False
        self.repeated_while_saving: int | None = None
        """A repeated signal that came while a checkpoint was written (the save went on)."""

    @property
    def requested(self) -> bool:
        """Whether a stop signal came to this process."""
        return self.signal_number is not None

    def __enter__(self) -> InterruptRequest:
        self._distributed = is_distributed()
        if threading.current_thread() is not threading.main_thread():
            return self
        for number in dict.fromkeys((*STOP_SIGNALS, *_ALSO_STOP_ON)):
            previous = signal.getsignal(number)
            if previous is signal.SIG_IGN:
                continue
            self._previous[number] = previous
            signal.signal(number, self._handle)
        return self

    def _handle(self, signal_number: int, frame: Any) -> None:
        if self.signal_number is None:
            self.signal_number = signal_number
            return
        if self._distributed:
            return
        if self._saving:
            self.repeated_while_saving = signal_number
            return
        name = signal_name(signal_number)
        message = f"{name} again: stopped at once, without saving the current step"
        raise StoppedAtOnce(message, signal_number)

    @contextmanager
    def saving(self) -> Iterator[None]:
        """While the block writes a checkpoint, a repeated signal does not interrupt it.

        The repeat is kept in :attr:`repeated_while_saving`; the first signal already asked the
        loop to stop, which it does once the save is complete.
        """
        self._saving = True
        try:
            yield
        finally:
            self._saving = False

    def agreed(self, *, final: bool = False) -> bool:
        """Whether to stop after this step; every rank of a distributed run must call it.

        With several processes the ranks agree every few steps, about every
        :data:`AGREE_EVERY_S` seconds, in a two-element all-reduce: the largest signal number
        and the longest time since the last agreement, from which every rank derives the same
        number of steps until the next one. ``final`` (the last step) always agrees.

        :returns: ``True`` on every rank when any rank got a signal (whose number is then
            taken by all of them).
        """
        if not self._distributed:
            return self.requested
        self._steps += 1
        if not final and self._steps < self._interval:
            return False
        dist = torch.distributed
        device = None
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        elapsed = int((time.monotonic() - self._since) * 1e6)
        values = torch.tensor([self.signal_number or 0, elapsed], dtype=torch.int64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        decided, micros = (int(v) for v in values.tolist())
        per_step = micros / 1e6 / self._steps
        self._interval = max(1, min(1000, int(AGREE_EVERY_S / per_step))) if per_step else 1
        self._steps, self._since = 0, time.monotonic()
        if decided:
            self.signal_number = decided
        return bool(decided)

    def __exit__(self, *exc_info: object) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, signal.SIG_DFL if previous is None else previous)
        self._previous = {}
