"""``plugtrain check --deep``: each trainer's sharded model built on a fake process group.

For a backend that defines ``deep_check(arguments, make_model, make_optimizer, world_size)``
(the CPU and GPU backends under ``data_parallel: fsdp2`` or ``hsdp``), the model and the
optimizer state are built on the ``meta`` device, sharded on torch's ``fake`` process group of
``world_size`` (no process started, no memory used), and the per-rank bytes of parameters,
gradients and optimizer state reported next to DDP's; a plan that cannot work (a module glob
matching nothing, a mesh that does not cover the processes) is an error at its line.

The model is the one training would step: each run-file callback's ``on_model_built`` is
applied to it (``Lora`` adds adapters and freezes the base), so optimizer state is planned for
the trainable weights only.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from plugtrain.config.plan import RemovedDefault, RunPlan, TrainerPlan
from plugtrain.config.validation.world_check import backend_mappings, issue_at
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.components import Registry

__all__ = ["deep_check"]


def deep_check(plan: RunPlan, registry: Registry, data: Any, world_size: int) -> list[str]:
    """The report lines of every trainer whose backend can say; raises on a plan's problems.

    :param data: the run file as read (for the positions of the backend's arguments).
    :raises ConfigError: naming each problem at its ``file:line:column``.
    """
    from plugtrain.train.assembly.trainers import optimizer_factory
    from plugtrain.train.components import build_component

    located = dict(backend_mappings(data))
    lines: list[str] = []
    issues: list[ConfigIssue] = []
    for trainer in plan.trainers:
        backend_class = registry.lookup("backend", trainer.backend_type).load()
        check = getattr(backend_class, "deep_check", None)
        if check is None:
            lines.append(f"{trainer.path}: the {trainer.backend_type} backend has no deep check")
            continue

        def make_model(plan: TrainerPlan = trainer) -> Any:
            model = build_component(registry, "model", plan.model)
            return _as_trained(registry, plan.callbacks, model, plan)

        make_optimizer = (
            optimizer_factory(registry, trainer.optimizer) if trainer.optimizer else None
        )
        report = check(dict(trainer.backend.arguments), make_model, make_optimizer, world_size)
        if report is None:
            lines.append(f"{trainer.path}: ddp (nothing sharded)")
            continue
        path = f"{trainer.path}.init.backend"
        for key, message in report.problems:
            issues.append(issue_at(path, located.get(path), key, message))
        lines += [f"{trainer.path}: {line}" for line in report.lines]
    if issues:
        raise ConfigError(issues)
    return lines


def _as_trained(registry: Registry, callbacks: Sequence[Any], model: Any, plan: TrainerPlan) -> Any:
    """``model`` as each callback's ``on_model_built`` leaves it (fresh callbacks each call)."""
    from plugtrain.train.components import build_component

    view = SimpleNamespace(seed=plan.seed, model_dir=plan.model_dir)
    for entry in callbacks:
        if isinstance(entry, RemovedDefault):
            continue
        hook = getattr(build_component(registry, "callback", entry), "on_model_built", None)
        if callable(hook):
            replaced = hook(view, model)
            model = model if replaced is None else replaced
    return model
