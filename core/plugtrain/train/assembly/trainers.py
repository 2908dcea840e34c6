"""Assembling a :class:`~plugtrain.train.trainer.Trainer` from one validated trainer plan.

Everything here reads a :class:`~plugtrain.config.plan.TrainerPlan` and builds through the one
registry that validated it; nothing parses the run file's mappings again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from plugtrain.config.plan import (
    BackendPlan,
    OptimizerPlan,
    RemovedDefault,
    TrainerPlan,
    plain,
)
from plugtrain.registry import Registry
from plugtrain.scheduler import scheduler_key
from plugtrain.train.components import build_component
from plugtrain.train.trainer import Trainer

__all__ = [
    "build_backend",
    "build_trainer",
    "group_factor_wrapper",
    "optimizer_factory",
    "scaled_per_group",
]

log = logging.getLogger("plugtrain")


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
        from plugtrain.param_groups import (
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


def build_backend(registry: Registry, plan: BackendPlan) -> Any:
    """The backend a trainer plan asks for, built through ``registry``."""
    return registry.resolve("backend", plan.backend_type)(**plan.call_arguments())


def _backend_for(plan: BackendPlan, registry: Registry, shared: dict[str, Any]) -> Any:
    """One backend object per distinct backend configuration; the same type throughout."""
    key = repr((plan.backend_type, sorted(plain(dict(plan.arguments)).items(), key=repr)))
    if key not in shared:
        shared[key] = build_backend(registry, plan)
    return shared[key]


def _listed(registry: Registry, kind: str, entries: Sequence[Any]) -> list[Any]:
    """Callbacks or loggers of a plan: built objects, and ``{Name: None}`` for removed defaults."""
    return [
        entry.to_mapping()
        if isinstance(entry, RemovedDefault)
        else build_component(registry, kind, entry)
        for entry in entries
    ]


def _sparsity_groups(registry: Registry, plan: TrainerPlan) -> list[Any] | None:
    """The plan's sparsity groups, built through ``registry`` once the model exists."""
    if not plan.sparsity:
        return None
    from plugtrain.train.loop import group_from_spec

    return [group_from_spec(registry, spec) for spec in plan.sparsity]


def build_trainer(plan: TrainerPlan, registry: Registry, backends: dict[str, Any]) -> Trainer:
    """A :class:`~plugtrain.train.trainer.Trainer` for one validated trainer of a run file.

    :param backends: backends already built for this run, by configuration; shared so that
        trainers with the same backend settings use one backend object.
    """
    schedulers = [
        (
            lambda optimizer, spec=spec: scaled_per_group(
                registry, optimizer, build_component(registry, "scheduler", spec, optimizer)
            )
        )
        for spec in plan.schedulers
    ]
    optimizer = optimizer_factory(registry, plan.optimizer) if plan.optimizer else None
    return Trainer(
        backend=_backend_for(plan.backend, registry, backends),
        model_dir=plan.model_dir,
        model=lambda: build_component(registry, "model", plan.model),
        optimizer=optimizer,
        schedulers=schedulers,
        loop=plan.loop,
        checkpoint=plan.checkpoint,
        logging=plan.logging,
        precision=plan.precision,
        sparsity=_sparsity_groups(registry, plan),
        callbacks=_listed(registry, "callback", plan.callbacks),
        loggers=_listed(registry, "logger", plan.loggers),
        seed=plan.seed,
        config=plain(plan.config),
        compile=plan.compile,
        activation_checkpointing=plan.activation_checkpointing,
        profile=plan.profile,
    )
