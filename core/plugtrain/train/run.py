"""Running a run file: build each trainer from its validated plan and fit or validate it.

Everything here reads a :class:`~plugtrain.config.plan.RunPlan` and builds through the one
registry that validated it; nothing parses the run file's mappings again.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plugtrain.config import load_plan
from plugtrain.config.plan import (
    BackendPlan,
    ComponentSpec,
    OptimizerPlan,
    RemovedDefault,
    RunPlan,
    TrainerPlan,
    ValidateAllPlan,
    ValidatePlan,
    plain,
)
from plugtrain.config.validate import plan_component
from plugtrain.errors import ConfigError, ConfigIssue, PluginLoadError
from plugtrain.kinds import KINDS
from plugtrain.registry import Component, Registry

__all__ = [
    "build_backend",
    "build_component",
    "build_trainer",
    "check_run_file",
    "run_file",
    "run_plan",
]

log = logging.getLogger("plugtrain")


def _context_count(kind: str, implementation: Any) -> int:
    """How many of the kind's context arguments the constructor takes (ChainedLR takes none)."""
    context = KINDS[kind].context_args
    if not context:
        return 0
    try:
        parameters = list(inspect.signature(implementation).parameters.values())
    except (TypeError, ValueError):
        return len(context)
    names = [p.name for p in parameters[: len(context)]]
    return len(context) if names == list(context) else 0


def build_component(registry: Registry, kind: str, spec: Any, *context: Any) -> Any:
    """Build a component of ``kind``; nested components are built first.

    :param spec: a validated :class:`~plugtrain.config.plan.ComponentSpec` (from a plan), or a
        ``{Name: {arguments}}`` mapping from Python, validated here first; anything else (an
        object already built) is returned as it is.
    :param context: what the kind's constructors take first (the params of an optimizer, the
        optimizer of a scheduler); handed on to nested components of the same kind.
    :raises ConfigError: for a mapping that does not validate, naming every problem.
    """
    if isinstance(spec, Mapping):
        spec = plan_component(registry, kind, spec)
    if not isinstance(spec, ComponentSpec):
        return spec
    component = registry.lookup(spec.kind, spec.name)
    implementation = registry.resolve(spec.kind, spec.name)
    arguments = spec.call_arguments()
    for key, value in arguments.items():
        if isinstance(value, ComponentSpec):
            arguments[key] = _build_child(registry, spec, value, context)
        elif isinstance(value, list) and any(isinstance(v, ComponentSpec) for v in value):
            arguments[key] = [_build_child(registry, spec, item, context) for item in value]
    count = _context_count(spec.kind, implementation)
    _check_signature(spec, component, implementation, context[:count], arguments)
    return implementation(*context[:count], **arguments)


def _build_child(
    registry: Registry, parent: ComponentSpec, child: Any, context: Sequence[Any]
) -> Any:
    """Build a nested component; a nested scheduler's first writes into the groups are undone.

    A child built for a wrapper writes its first value into the groups it targets (a torch
    scheduler: every group); neither its siblings nor other schedulers may see that.
    """
    if not isinstance(child, ComponentSpec) or child.kind != parent.kind:
        return build_component(registry, getattr(child, "kind", ""), child)
    if child.kind != "scheduler" or not context:
        return build_component(registry, child.kind, child, *context)
    from plugtrain.scheduler import keep_group_values

    with keep_group_values(context[0]):
        return build_component(registry, child.kind, child, *context)


def _check_signature(
    spec: ComponentSpec,
    component: Component,
    implementation: Any,
    context: Sequence[Any],
    arguments: Mapping[str, Any],
) -> None:
    """Name the provider when a constructor refuses what its own schema accepted."""
    try:
        signature = inspect.signature(implementation)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*context, **arguments)
    except TypeError as exc:
        message = (
            f"{spec.where}: {component.kind} {component.name!r} from {component.provider} does "
            f"not accept arguments its schema allows ({exc}): the plugin's schema and "
            "constructor disagree; plugtrain.testing.check_plugin_contract reports such "
            "mismatches"
        )
        raise PluginLoadError(message) from exc


def _optimizer_factory(registry: Registry, plan: OptimizerPlan) -> Any:
    filters = (
        [f.to_mapping() for f in plan.param_filters] if plan.param_filters is not None else None
    )

    def make(model: Any) -> Any:
        from plugtrain.train.params import adjust_learning_rate_groups, build_param_groups

        groups = build_param_groups(
            model, filters, exclude_from_weight_decay=plan.exclude_from_weight_decay
        )
        if not plan.adjust_learning_rate:
            return build_component(registry, "optimizer", plan.spec, groups)
        groups, unused = adjust_learning_rate_groups(groups, plan.adjust_learning_rate, model)
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


def _scaled_per_group(registry: Registry, optimizer: Any, scheduler: Any) -> Any:
    """``scheduler``, wrapped in ``ScalePerParamLR`` where the groups carry lr factors.

    Model Zoo's rule: with ``adjust_learning_rate`` groups, an LR scheduler's value is
    multiplied by each group's factor.
    """
    from plugtrain.scheduler import scheduler_key

    scaled = any("adjust_learning_rate" in group for group in optimizer.param_groups)
    name = type(scheduler).__name__
    if not scaled or name == "ScalePerParamLR" or scheduler_key(scheduler) != "lr":
        return scheduler
    return registry.resolve("scheduler", "ScalePerParamLR")(optimizer, scheduler=scheduler)


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
    from plugtrain.train.sparsity import group_from_spec

    return [group_from_spec(registry, spec) for spec in plan.sparsity]


def build_trainer(plan: TrainerPlan, registry: Registry, backends: dict[str, Any]) -> Any:
    """A :class:`~plugtrain.train.trainer.Trainer` for one validated trainer of a run file.

    :param backends: backends already built for this run, by configuration; shared so that
        trainers with the same backend settings use one backend object.
    """
    from plugtrain.train.trainer import Trainer

    schedulers = [
        (
            lambda optimizer, spec=spec: _scaled_per_group(
                registry, optimizer, build_component(registry, "scheduler", spec, optimizer)
            )
        )
        for spec in plan.schedulers
    ]
    optimizer = _optimizer_factory(registry, plan.optimizer) if plan.optimizer else None
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
    )


def check_run_file(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, import_plugins: bool = False
) -> list[TrainerPlan]:
    """Load, override and validate a run file; imports no torch.

    :param import_plugins: import every module the file lists under ``plugins:`` (what ``fit``
        and ``validate`` do); by default only installed plugins or those named with ``-p``.
    """
    plan, _registry = load_plan(path, overrides, import_local=import_plugins)
    return list(plan.trainers)


def _ckpt_argument(section: Any) -> dict[str, Any]:
    return {"ckpt_path": section.ckpt_path} if section.ckpt_path_given else {}


def run_plan(plan: RunPlan, registry: Registry, *, mode: str = "fit") -> list[Any]:
    """Run the trainers of a validated plan in order.

    :param registry: the registry the plan was validated with.
    :param mode: ``"fit"`` runs each trainer's ``fit`` then its ``validate`` section;
        ``"validate"`` runs only ``validate`` sections (or evaluates ``fit.val_dataloader``);
        ``"validate_all"`` runs only ``validate_all`` sections.
    :returns: the final validation metrics of each trainer; with ``"validate_all"``, each
        trainer's list of records (one per checkpoint and data loader).
    """
    for warning in plan.warnings:
        log.warning("warning: %s", warning)
    if mode == "validate_all" and all(t.validate_all is None for t in plan.trainers):
        message = "nothing to do: no trainer has a validate_all section"
        raise ConfigError([ConfigIssue("", message, plan.source)])
    backends: dict[str, Any] = {}
    results: list[Any] = []
    for trainer_plan in plan.trainers:
        if mode == "validate_all":
            if trainer_plan.validate_all is not None:
                trainer = build_trainer(trainer_plan, registry, backends)
                results.append(_validate_all(trainer, trainer_plan.validate_all, registry))
            continue
        trainer = build_trainer(trainer_plan, registry, backends)
        metrics: dict[str, float] = {}
        fit = trainer_plan.fit
        if mode == "fit" and fit is not None:
            train = build_component(registry, "dataloader", fit.train_dataloader)
            val = (
                build_component(registry, "dataloader", fit.val_dataloader)
                if fit.val_dataloader
                else None
            )
            metrics = trainer.fit(train, val, **_ckpt_argument(fit))
            _plot_schedules(trainer_plan, trainer, registry)
        validate = trainer_plan.validate
        if validate is None and mode == "validate" and fit and fit.val_dataloader:
            validate = ValidatePlan(fit.val_dataloader)
        if validate is not None:
            val = build_component(registry, "dataloader", validate.val_dataloader)
            metrics = trainer.validate(val, **_ckpt_argument(validate))
        results.append(metrics)
    for backend in backends.values():
        backend.close()  # e.g. leave a data-parallel process group together
    return results


def _validate_all(trainer: Any, section: ValidateAllPlan, registry: Registry) -> list[Any]:
    """Run one trainer's ``validate_all``: data loaders named ``INDEX:Name``."""
    loaders = {
        f"{index}:{spec.name}": build_component(registry, "dataloader", spec)
        for index, spec in enumerate(section.val_dataloaders)
    }
    if section.ckpt_paths_given:
        paths = list(section.ckpt_paths) if section.ckpt_paths is not None else None
        return trainer.validate_all(loaders, paths)  # type: ignore[no-any-return]
    return trainer.validate_all(loaders)  # type: ignore[no-any-return]


def run_file(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, mode: str = "fit"
) -> list[Any]:
    """Validate the whole file once, then run its trainers in order (see :func:`run_plan`)."""
    plan, registry = load_plan(path, overrides, import_local=True)
    return run_plan(plan, registry, mode=mode)


def _plot_schedules(plan: TrainerPlan, trainer: Any, registry: Registry) -> None:
    """Draw the run's schedules into ``model_dir/schedule.png`` (a warning without matplotlib)."""
    if not (plan.schedulers or plan.sparsity) or not trainer.is_main_process:
        return
    from plugtrain.authoring.schedule_plot import MATPLOTLIB_MISSING, plot_schedules

    try:
        import matplotlib  # noqa: F401 - optional
    except ImportError:
        log.warning("schedule.png not written: %s", MATPLOTLIB_MISSING)
        return

    target = Path(trainer.model_dir) / "schedule.png"
    specs = [spec.to_mapping() for spec in plan.schedulers]
    optimizer = plan.optimizer.spec.to_mapping() if plan.optimizer else None
    steps = trainer.global_step or None
    plot_schedules(
        specs, target, steps=steps, registry=registry, optimizer=optimizer, sparsity=plan.sparsity
    )
    log.info("schedule plot written to %s", target)
