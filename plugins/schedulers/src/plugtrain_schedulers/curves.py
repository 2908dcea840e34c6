"""Closed forms of every schedule: a value as a pure function of the step. No torch here."""

from __future__ import annotations

import math

__all__ = ["polynomial"]


def polynomial(
    step: int, initial: float, end: float, total_iters: int, power: float = 1.0, cycle: bool = False
) -> float:
    """``(initial - end) * (1 - e / T) ** power + end``, held at ``end`` from ``T`` on.

    With ``cycle``, ``T`` becomes ``T * ceil(e / T)`` (``T`` at ``e = 0``) so the decay restarts.
    """
    if cycle:
        total_iters = total_iters * max(1, math.ceil(step / total_iters))
    if step >= total_iters:
        return end
    return (initial - end) * (1.0 - step / total_iters) ** power + end
