"""Session set-up shared by the core's tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _sigint_delivered() -> Iterator[None]:
    """Let SIGINT act, even when pytest was started as a background job of a script.

    A shell without job control starts ``cmd &`` with SIGINT ignored, and every child inherits
    that, so the Ctrl-C tests (in process, and of ``plugtrain`` subprocesses) would see a signal
    that a person at a terminal can never send to such a job. plugtrain itself keeps an ignored
    signal ignored (tested with SIGHUP in ``tests/reliability/test_signals.py``).
    """
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, previous)
