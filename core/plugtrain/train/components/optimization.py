"""An optimizer and its schedulers for a model, from the mapping a run file holds.

For a training loop that is not plugtrain's (your own, Lightning, the Hugging Face ``Trainer``)
and for the Trainer itself (``Trainer(optimizer={"AdamW": {...}}, schedulers=[...])``):
:func:`build_optimization` validates ``{"optimizer": ..., "schedulers": [...]}`` as ``plugtrain
check`` does and builds both the way a run file's trainer is built (``params:`` tagging, the
bias/norm weight-decay split, ``adjust_learning_rate`` with ``ScalePerParamLR``, one scheduler
per key and group). :func:`optimizer_factory` and :func:`scaled_per_group` are those steps, also
used when a trainer is assembled from a run file's plan.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.bases.scheduler import scheduler_key
from plugtrain.config.plan import ComponentSpec, OptimizerPlan
from plugtrain.config.validation.checker import Checker
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.components import Registry
from plugtrain.train.components.building import build_component
from plugtrain.train.components.scheduler_checks import check_scheduler_overlap

__all__ = [
    "Optimization",
    "build_optimization",
    "group_factor_wrapper",
    "optimizer_factory",
    "scaled_per_group",
]

log = logging.getLogger("plugtrain")

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
    from plugtrain.discovery.loading import get_registry

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


def optimizer_factory(registry: Registry, plan: OptimizerPlan) -> Any:
    """``make(model) -> optimizer``: param groups tagged as the plan says, then the optimizer.

    The groups carry the bias/norm weight-decay split and ``adjust_learning_rate`` factors:
    the run file's, then, for the parameters none of those names, the model's own
    (``learning_rate_factors()``, muP's for a muP decoder).
    """
    filters = (
        [f.to_mapping() for f in plan.param_filters] if plan.param_filters is not None else None
    )

    def make(model: Any) -> Any:
        from plugtrain.bases.param_groups import (
            adjust_learning_rate_groups,
            build_param_groups,
            model_learning_rate_factors,
        )

        groups = build_param_groups(
            model, filters, exclude_from_weight_decay=plan.exclude_from_weight_decay
        )
        own = model_learning_rate_factors(model)
        if not plan.adjust_learning_rate and not own:
            return build_component(registry, "optimizer", plan.spec, groups)
        groups, unused = adjust_learning_rate_groups(
            groups, plan.adjust_learning_rate, model, defaults=own
        )
        for key in unused:
            log.warning(
                "%s.adjust_learning_rate.%s matches no parameter of the model: no effect",
                plan.spec.where,
                key,
            )
        optimizer = build_component(registry, "optimizer", plan.spec, groups)
        for group in optimizer.param_groups:  # without an LR scheduler the factor acts here
            group["lr"] = group["lr"] * group.get("adjust_learning_rate", 1.0)
        return optimizer

    return make


def group_factor_wrapper(registry: Registry, provider: str | None = None) -> Any:
    """The installed LR scheduler that applies each group's factor to a child's value.

    Found by what its schema declares (``applies_group_factors``, see
    :class:`plugtrain.scheduler.ScheduleSchema`), never by name; among several, the one of
    ``provider`` (the distribution of the scheduler being wrapped) first. ``None``: none.
    """
    candidates = [
        component
        for component in registry.components("scheduler")
        if getattr(component.schema_class, "applies_group_factors", False)
        and getattr(component.schema_class, "schedule_key", "lr") == "lr"
    ]
    candidates.sort(key=lambda component: component.plugin.distribution != provider)
    if not candidates:
        return None
    return candidates[0].load()


def scaled_per_group(registry: Registry, optimizer: Any, scheduler: Any) -> Any:
    """``scheduler``, wrapped so that it applies the groups' ``adjust_learning_rate`` factors.

    Model Zoo's rule: with ``adjust_learning_rate`` groups, an LR scheduler's value is
    multiplied by each group's factor.
    """
    scaled = any("adjust_learning_rate" in group for group in optimizer.param_groups)
    schema = getattr(type(scheduler), "schema", None)
    if not scaled or scheduler_key(scheduler) != "lr":
        return scheduler
    if getattr(schema, "applies_group_factors", False):
        return scheduler
    wrapper = group_factor_wrapper(registry, _distribution_of(registry, scheduler))
    if wrapper is None:
        log.warning(
            "%s does not apply the param groups' adjust_learning_rate factors and no installed "
            "scheduler can (one whose schema declares applies_group_factors, such as "
            "ScalePerParamLR of plugtrain-schedulers): the factors have no effect",
            type(scheduler).__name__,
        )
        return scheduler
    return wrapper(optimizer, scheduler=scheduler)


def _distribution_of(registry: Registry, scheduler: Any) -> str | None:
    """The distribution whose registered scheduler ``scheduler`` is an instance of."""
    target = f"{type(scheduler).__module__}:{type(scheduler).__qualname__}"
    for component in registry.components("scheduler"):
        if component.target == target:
            return component.plugin.distribution
    return None
