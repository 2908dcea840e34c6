"""Shared helpers of the scheduler tests (test modules cannot import each other)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch

import plugtrain


def build_optimizer(*tags: Any, lr: float = 0.5, weight_decay: float = 0.25) -> torch.optim.SGD:
    """An SGD optimizer with one param group per entry of ``tags`` (``...``: no ``tags`` key)."""
    groups = []
    for tag in tags or (...,):
        group: dict[str, Any] = {"params": [torch.nn.Parameter(torch.zeros(2))]}
        if tag is not ...:
            group["tags"] = tag
        groups.append(group)
    return torch.optim.SGD(groups, lr=lr, weight_decay=weight_decay)


def run(scheduler: Any, steps: Iterable[int], key: str | None = None, group: int | None = None):
    """The value in the scheduler's first targeted group (or ``group``) at each of ``steps``."""
    key = key or scheduler.param_key
    index = scheduler.group_indices[0] if group is None else group
    wanted = sorted(set(steps))
    found = {}
    for e in range(wanted[-1] + 1):
        if e:
            scheduler.step()
        if e in wanted:
            found[e] = scheduler.optimizer.param_groups[index][key]
    return found


@pytest.fixture
def optimizer() -> torch.optim.SGD:
    """One untagged param group, lr 0.5, weight decay 0.25."""
    return build_optimizer()


@pytest.fixture
def scheduler_class() -> Callable[[str], Any]:
    """Resolve a scheduler by name through the registry."""
    return lambda name: plugtrain.resolve("scheduler", name)


@pytest.fixture
def helpers() -> Any:
    """The module-level helpers, for tests that need them."""

    class Helpers:
        build_optimizer = staticmethod(build_optimizer)
        run = staticmethod(run)

    return Helpers
