"""How each CPU step of an optimizer runs, on how many threads, kernels or not: :class:`StepTuner`.

All is fastest on a quiet machine; one wins when another process keeps a core busy and each of
a step's many parallel regions waits for the descheduled thread (same numbers: bit for bit where
the update is elementwise). After the first step the tuner times all threads, one and all again,
runs the faster by the median of recent times, retries the other after :data:`EXPLORE_FIRST`
steps (doubling up to :data:`EXPLORE_LAST` while the choice holds) and times both again at once
after two steps :data:`SLOWDOWN` times slower than the chosen plan's best. It sets the stepping
thread's own counts (OpenMP's and MKL's), never torch's setting, which other threads see.

Where a step runs the C kernels (:mod:`~plugtrain_optimizers._native`) of an optimizer whose
kernels give the torch-operation path's numbers to the bit (``kernels_match_torch_path``: the
elementwise updates without a square root or a sum), that path (what
``PLUGTRAIN_NATIVE_KERNELS=0`` runs) is a plan too, on each thread count, from step
:data:`TORCH_PATH_FROM` on (the kernels, the usual best, make the first choice: the first steps
stay cheap): those steps are then never slower than that path for long, whatever the CPU makes
of the kernels. The others keep their kernels: a choice made by timing never changes a run's
numbers. ``PLUGTRAIN_TUNE_THREADS=0`` keeps the kernels and all threads.
"""

from __future__ import annotations

import ctypes
import functools
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import torch

from plugtrain_optimizers import _native

__all__ = [
    "EXPLORE_FIRST",
    "EXPLORE_LAST",
    "SAMPLES",
    "SLOWDOWN",
    "TORCH_PATH_FROM",
    "TUNE_VARIABLE",
    "Plan",
    "StepTuner",
    "tuning_threads",
]

TUNE_VARIABLE = "PLUGTRAIN_TUNE_THREADS"
"""Set to ``0`` to have the optimizers made afterwards step on all of torch's threads."""


def tuning_threads() -> bool:
    """Whether optimizers made now get a :class:`StepTuner` (GNU OpenMP, not turned off)."""
    off = os.environ.get(TUNE_VARIABLE, "1").strip().lower() in ("0", "false", "no", "off")
    return not off and bool(_setters())


@functools.cache
def _setters() -> list[Callable[[int], int]]:
    """Setters of the calling thread's own counts, OpenMP's and MKL's ([] without GNU OpenMP)."""
    if _native._torch_not_gnu_openmp():
        return []
    found = []
    mkl = (Path(torch.__file__).with_name("lib") / "libtorch_cpu.so", "MKL_Set_Num_Threads_Local")
    for library, name in (("libgomp.so.1", "omp_set_num_threads"), mkl):
        try:
            function = getattr(ctypes.CDLL(str(library)), name)  # the libraries torch loaded
        except (OSError, AttributeError):
            continue
        function.argtypes, function.restype = [ctypes.c_int], ctypes.c_int
        found.append(function)
    return found if found and found[0].__name__ == "omp_set_num_threads" else []


def _limit(count: int) -> list[tuple[Callable[[int], int], int]]:
    """Run this thread's parallel regions on ``count`` threads; what undoes it: (setter, value)."""
    before = torch.get_num_threads()
    omp, *mkl = _setters()
    omp(count)
    return [(omp, before)] + [(set_mkl, set_mkl(count)) for set_mkl in mkl]  # returns the last


EXPLORE_FIRST = 32
"""Steps between two tries of the plans not chosen, at first."""

EXPLORE_LAST = 1024
"""The longest interval between two tries (the interval doubles while the choice holds)."""

SAMPLES = 3
"""Recent step times kept per plan; a plan's time is their median."""

SLOWDOWN = 2.0
"""Two steps in a row this many times slower than the chosen plan's recent time: a new load."""

TORCH_PATH_FROM = EXPLORE_FIRST
"""The step from which the torch-operation path is among the plans (where kernels run)."""


class Plan(NamedTuple):
    """How one step runs: on ``threads`` intra-op threads, with the C kernels or without."""

    threads: int
    kernels: bool = True


class StepTuner:
    """Chooses the :class:`Plan` of each step of one optimizer by the measured step times.

    :param clock: the timer (seconds); tests pass their own.
    :param torch_path: whether the torch-operation path is a plan where a step runs kernels
        (benches that time the kernels turn it off).
    """

    def __init__(
        self, *, clock: Callable[[], float] = time.perf_counter, torch_path: bool = True
    ) -> None:
        self.clock = clock
        self.torch_path = torch_path
        self.kernels_ran = False  # whether the last step allowed to run kernels ran any
        self.steps = 0
        self.times: dict[Plan, deque[float]] = {}
        self.measured_at: dict[Plan, int] = {}
        self.chosen: Plan | None = None
        self.round_from: Plan | None = None  # the plan chosen when the running tries began
        self.slow_steps = 0
        self.trying: list[Plan] = []
        self.interval = EXPLORE_FIRST
        self.next_try = 0

    def plans(self, threads: int) -> list[Plan]:
        """The plans for ``threads`` intra-op threads, the usual best first.

        With the torch-operation path among them from step :data:`TORCH_PATH_FROM` on, where
        the last step with kernels allowed ran any (nothing to compare otherwise).
        """
        counts = [threads, 1] if threads > 1 else [1]
        plans = [Plan(count) for count in counts]
        if self.torch_path and self.kernels_ran and self.steps >= TORCH_PATH_FROM:
            plans += [Plan(count, kernels=False) for count in counts]
        return plans

    def estimate(self, plan: Plan) -> float:
        """A plan's step time: the median of its recent ones.

        Not the least: under load a parallel region is now quick, now stalled on a descheduled
        thread, and the luckiest of a few steps would hide that.
        """
        return statistics.median(self.times[plan])

    def choose(self, threads: int) -> tuple[Plan, bool]:
        """The plan of the next step, and whether its time is to be recorded."""
        plans = self.plans(threads)
        if self.steps == 0:  # the first step allocates state and scratch: not representative
            return plans[0], False
        if not self._measured(plans):  # each once, the usual best twice
            untried = [p for p in plans if p not in self.times]
            return (untried or plans)[0], True
        pending = [p for p in self.trying if p in plans]
        if pending:
            return pending[0], True
        return min(plans, key=self.estimate), True

    def record(self, plan: Plan, seconds: float, threads: int) -> None:
        """Note the time of a step run with ``plan``; choose the plan of the next steps."""
        self.steps += 1
        if plan in self.trying:  # its earlier times are stale: measured before the last tries
            self.times[plan] = deque(maxlen=SAMPLES)
        times = self.times.setdefault(plan, deque(maxlen=SAMPLES))
        slow = bool(times) and seconds > SLOWDOWN * min(times)
        times.append(seconds)
        self.measured_at[plan] = self.steps
        plans = self.plans(threads)
        if not self._measured(plans):
            return
        if plan in self.trying:
            self.trying.remove(plan)
            if not self.trying:  # the round of tries is over
                self._schedule(changed=min(plans, key=self.estimate) != self.round_from)
        elif plan == self.chosen:
            self.slow_steps = self.slow_steps + 1 if slow else 0
            if self.slow_steps >= 2:  # twice in a row: time every plan again, this one last
                self.slow_steps = 0
                self.trying = [p for p in plans if p != plan] + [plan]
                self.round_from = plan
        else:  # every plan has been measured once: the first choice
            self._schedule(changed=True)
        self.chosen = min(plans, key=self.estimate)
        if self.steps >= self.next_try and not self.trying:
            others = [p for p in plans if p != self.chosen]
            self.trying = sorted(others, key=lambda p: self.measured_at[p])  # stalest first
            self.round_from = self.chosen

    def _measured(self, plans: list[Plan]) -> bool:
        """Whether a choice can be made: every plan timed (the first one twice, at first)."""
        if not all(p in self.times for p in plans):
            return False
        return self.chosen is not None or len(self.times[plans[0]]) >= 2

    def _schedule(self, *, changed: bool) -> None:
        """Set the next round of tries: soon after a change, later while the choice holds."""
        self.interval = EXPLORE_FIRST if changed else min(2 * self.interval, EXPLORE_LAST)
        self.next_try = self.steps - 1 + self.interval

    @contextmanager
    def step(self) -> Iterator[None]:
        """Run the body (one optimizer step) with the chosen plan, timed."""
        threads = torch.get_num_threads()
        plan, timed = self.choose(threads)
        undo = _limit(plan.threads) if plan.threads != threads else []
        calls = _native.calls()
        start = self.clock()
        try:
            if plan.kernels:
                yield
            else:
                with _native.torch_path():
                    yield
        finally:
            seconds = self.clock() - start
            for setter, value in undo:
                setter(value)
        if plan.kernels:
            self.kernels_ran = _native.calls() != calls
        if timed:
            self.record(plan, seconds, threads)
        else:
            self.steps += 1
