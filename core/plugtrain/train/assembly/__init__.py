"""Building what a run file describes, and running it.

A Trainer from a trainer plan, optimization for other trainers, schedule
values, the deep check, and running or launching a whole run file.
"""

from __future__ import annotations

from plugtrain.train.assembly.deep_check import deep_check
from plugtrain.train.assembly.launch import launch_if_needed, requeue_on_signal
from plugtrain.train.assembly.optimization import build_optimization
from plugtrain.train.assembly.run import run_plan
from plugtrain.train.assembly.schedule_values import SteppedSchedule
from plugtrain.train.assembly.trainers import build_trainer, optimizer_factory

__all__ = [
    "SteppedSchedule",
    "build_optimization",
    "build_trainer",
    "deep_check",
    "launch_if_needed",
    "optimizer_factory",
    "requeue_on_signal",
    "run_plan",
]
