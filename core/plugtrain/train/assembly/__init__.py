"""Building what a run file describes, and running it.

A Trainer from a trainer plan, optimization for other trainers, schedule
values, the deep check, and running a whole run file (launching it is :mod:`plugtrain.launching`).
"""

from __future__ import annotations

from plugtrain.train.assembly.deep_check import deep_check
from plugtrain.train.assembly.optimization import build_optimization
from plugtrain.train.assembly.run import run_plan
from plugtrain.train.assembly.schedule_values import SteppedSchedule
from plugtrain.train.assembly.trainers import build_trainer, optimizer_factory

__all__ = [
    "SteppedSchedule",
    "build_optimization",
    "build_trainer",
    "deep_check",
    "optimizer_factory",
    "run_plan",
]
