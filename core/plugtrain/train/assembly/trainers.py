"""Assembling a :class:`~plugtrain.train.trainer.Trainer` from one validated trainer plan.

Everything here reads a :class:`~plugtrain.config.plan.TrainerPlan` and builds through the one
registry that validated it; nothing parses the run file's mappings again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from plugtrain.config.plan import (
    BackendPlan,
    RemovedDefault,
    TrainerPlan,
    plain,
)
from plugtrain.registry.components import Registry
from plugtrain.train.components import (
    build_component,
    group_factor_wrapper,
    optimizer_factory,
    scaled_per_group,
)
from plugtrain.train.trainer import Trainer

__all__ = [
    "build_backend",
    "build_trainer",
    "group_factor_wrapper",
    "optimizer_factory",
    "scaled_per_group",
]

log = logging.getLogger("plugtrain")


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


def _model_factory(
    plan: TrainerPlan, registry: Registry, backend: Any, weights_loaded: bool
) -> Callable[[], Any]:
    """What builds the plan's model: for a checkpoint to fill, when one will be loaded.

    Only on a single CPU process without sparsity (which reads the weights as they are built):
    there the model is built on ``meta`` and never initialised (see
    :mod:`plugtrain.conversion.meta_build`).
    """

    def build() -> Any:
        return build_component(registry, "model", plan.model)

    single = int(getattr(backend, "world_size", 1)) == 1
    on_cpu = getattr(getattr(backend, "device", None), "type", None) == "cpu"
    if not (weights_loaded and single and on_cpu and not plan.sparsity):
        return build
    from plugtrain.conversion.meta_build import build_for_loading

    return lambda: build_for_loading(build)


def build_trainer(
    plan: TrainerPlan,
    registry: Registry,
    backends: dict[str, Any],
    *,
    weights_loaded: bool = False,
) -> Trainer:
    """A :class:`~plugtrain.train.trainer.Trainer` for one validated trainer of a run file.

    :param backends: backends already built for this run, by configuration; shared so that
        trainers with the same backend settings use one backend object.
    :param weights_loaded: whether the run loads a checkpoint into the model before using it
        (a ``ckpt_path`` to fit from or to validate): then the model is not initialised first
        where it need not be (:func:`_model_factory`).
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
    backend = _backend_for(plan.backend, registry, backends)
    return Trainer(
        backend=backend,
        model_dir=plan.model_dir,
        model=_model_factory(plan, registry, backend, weights_loaded),
        registry=registry,
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
