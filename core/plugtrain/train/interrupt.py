"""Stopping ``fit`` gracefully on SIGINT (Ctrl-C)."""

from __future__ import annotations

import signal
import threading
from typing import Any

import torch

__all__ = ["InterruptRequest", "is_distributed"]


def is_distributed() -> bool:
    """Whether several processes train together (they would have to agree on stopping)."""
    dist = torch.distributed
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


class InterruptRequest:
    """During ``fit``, SIGINT asks the loop to stop after the current step.

    A second SIGINT stops at once. Installed on the main thread only, in a single process; the
    previous handler is restored afterwards.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptRequest:
        if threading.current_thread() is not threading.main_thread() or is_distributed():
            return self
        self._previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, self._handle)
        self._installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(signal.SIGINT, previous)
            self._installed = False
