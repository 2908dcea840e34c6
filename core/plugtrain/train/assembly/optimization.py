"""An optimizer and its schedulers for a model, from the mapping a run file holds.

For a training loop that is not plugtrain's (your own, Lightning, the Hugging Face ``Trainer``):
:func:`build_optimization` validates ``{"optimizer": ..., "schedulers": [...]}`` as ``plugtrain
check`` does and builds both the way plugtrain's ``Trainer`` does (``params:`` tagging, the
bias/norm weight-decay split, ``adjust_learning_rate`` with ``ScalePerParamLR``, one scheduler
per key and group).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.config.checker import Checker
from plugtrain.config.plan import ComponentSpec, OptimizerPlan
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry import Registry

__all__ = ["Optimization", "build_optimization"]

SECTIONS = ("optimizer", "schedulers")
"""The keys :func:`build_optimization` reads: those of a run file's ``trainer.init``."""


@attrs.frozen
class Optimization:
    """What :func:`build_optimization` returns.

    :param optimizer: the ``torch.optim.Optimizer``, its param groups tagged as the run file says.
    :param schedulers: the schedulers in the order written; each is a
        ``torch.optim.lr_scheduler.LRScheduler`` too (Lightning's check); step each one after
        every ``optimizer.step()``.
    """

    optimizer: Any
    schedulers: tuple[Any, ...] = ()


def build_optimization(
    model: Any, config: Mapping[str, Any], *, registry: Registry | None = None
) -> Optimization:
    """Build the optimizer and schedulers of ``config`` for ``model``.

    :param model: a ``torch.nn.Module`` (its named parameters are tagged by ``params:``).
    :param config: ``{"optimizer": {Name: {arguments}}, "schedulers": [{Name: {arguments}}]}``,
        as under a run file's ``trainer.init`` (``schedulers`` may be omitted).
    :param registry: the registry to resolve names in (default: :func:`plugtrain.get_registry`).
    :raises ConfigError: listing every problem of ``config`` at once.
    """
    from plugtrain.plugins import get_registry
    from plugtrain.train.assembly.trainers import optimizer_factory, scaled_per_group
    from plugtrain.train.components import build_component, check_scheduler_overlap

    registry = registry if registry is not None else get_registry()
    optimizer_plan, scheduler_specs = _validated(registry, config)
    optimizer = optimizer_factory(registry, optimizer_plan)(model)
    schedulers = tuple(
        scaled_per_group(
            registry, optimizer, build_component(registry, "scheduler", spec, optimizer)
        )
        for spec in scheduler_specs
    )
    check_scheduler_overlap(schedulers)
    return Optimization(optimizer, schedulers)


def _validated(
    registry: Registry, config: Mapping[str, Any]
) -> tuple[OptimizerPlan, list[ComponentSpec]]:
    """The optimizer's plan and the schedulers' specs, or a :class:`ConfigError`."""
    if not isinstance(config, Mapping):  # callers are not type-checked
        message = f"must be a mapping with the keys {', '.join(SECTIONS)}"  # type: ignore[unreachable]
        raise ConfigError([ConfigIssue("config", message)])
    checker = Checker(registry)
    for key in config:
        if key not in SECTIONS:
            message = f"unknown key {key!r}; build_optimization reads {', '.join(SECTIONS)}"
            checker.add((str(key),), message)
    if config.get("optimizer") is None:
        checker.add(("optimizer",), "an optimizer {Name: {arguments}} is required")
        raise ConfigError(checker.issues)
    optimizer = checker.component("optimizer", config["optimizer"], ("optimizer",), None, None)
    written = config.get("schedulers") or []
    if isinstance(written, str) or not isinstance(written, list | tuple | Mapping):
        checker.add(("schedulers",), "must be a list of {Name: {arguments}} mappings")
        written = []
    found = checker.components("scheduler", written, ("schedulers",), None, None, many=True)
    schedulers = found if isinstance(found, list) else [found]
    if checker.issues or not isinstance(optimizer, OptimizerPlan):
        raise ConfigError(checker.issues)
    return optimizer, [s for s in schedulers if isinstance(s, ComponentSpec)]
