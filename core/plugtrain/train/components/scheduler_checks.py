"""Checks on the schedulers a Trainer was given: one owner per param group and setting."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from plugtrain.bases.scheduler import excluded_from_decay, scheduler_groups, scheduler_key
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["check_scheduler_overlap"]

log = logging.getLogger("plugtrain")


def check_scheduler_overlap(schedulers: Sequence[Any]) -> None:
    """Reject two schedulers of the same kind (LR or WD) that target one param group.

    Kind and groups are read through the scheduler protocol (:mod:`plugtrain.scheduler`).
    """
    owner: dict[tuple[str, int], int] = {}
    for index, scheduler in enumerate(schedulers):
        for group in scheduler_groups(scheduler):
            key = (scheduler_key(scheduler), group)
            if key in owner:
                message = (
                    f"schedulers {owner[key]} ({type(schedulers[owner[key]]).__name__}) and "
                    f"{index} ({type(scheduler).__name__}) both set '{key[0]}' of param group "
                    f"{group}; give them disjoint param_group_tags"
                )
                raise ConfigError([ConfigIssue("schedulers", message)])
            owner[key] = index
        if scheduler_key(scheduler) == "weight_decay":
            _warn_excluded(scheduler, index)


def _warn_excluded(scheduler: Any, index: int) -> None:
    """Warn about a weight-decay scheduler that writes zero-decay groups (not one of ours)."""
    groups = scheduler.optimizer.param_groups
    hit = [g for g in scheduler_groups(scheduler) if excluded_from_decay(groups[g])]
    if hit:
        log.warning(
            "scheduler %d (%s) sets the weight decay of the zero-decay param groups %s (bias "
            "and normalisation parameters); derive it from plugtrain.scheduler.Scheduler, or "
            "skip groups where plugtrain.scheduler.excluded_from_decay(group) is true",
            index,
            type(scheduler).__name__,
            hit,
        )
