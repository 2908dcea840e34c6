"""Running a run file: build each trainer from its validated plan and fit or validate it."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plugtrain import plugins
from plugtrain.config import check_run, load_run_file
from plugtrain.config.validate import OPTIMIZER_TRAINER_KEYS, TrainerPlan
from plugtrain.errors import PluginLoadError
from plugtrain.kinds import KINDS
from plugtrain.registry import Registry
from plugtrain.schema import arg_infos

__all__ = ["build_component", "check_run_file", "run_file"]

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
    """Build ``{Name: {arguments}}`` of ``kind``; nested components are built first.

    :param context: what the kind's constructors take first (the params of an optimizer, the
        optimizer of a scheduler). Already built objects (from Python) are returned as they are.
    """
    if not isinstance(spec, Mapping):
        return spec
    ((name, arguments),) = spec.items()
    component = registry.lookup(kind, name)
    implementation = registry.resolve(kind, name)
    arguments = dict(arguments or {})
    for info in arg_infos(component.schema_class):
        if info.component is None or arguments.get(info.name) is None:
            continue
        value = arguments[info.name]
        child_context = context if info.component == kind else ()
        if info.many and isinstance(value, list | tuple):
            arguments[info.name] = [
                _build_nested(registry, info.component, item, child_context) for item in value
            ]
        else:
            arguments[info.name] = _build_nested(registry, info.component, value, child_context)
    count = _context_count(kind, implementation)
    _check_signature(component, implementation, context[:count], arguments)
    return implementation(*context[:count], **arguments)


def _build_nested(registry: Registry, kind: str, spec: Any, context: Sequence[Any]) -> Any:
    """Build a nested component; a nested scheduler's first writes into the groups are undone.

    A child built for a wrapper writes its first value into the groups it targets (a torch
    scheduler: every group); neither its siblings nor other schedulers may see that.
    """
    if kind != "scheduler" or not context:
        return build_component(registry, kind, spec, *context)
    from plugtrain.scheduler import keep_group_values

    with keep_group_values(context[0]):
        return build_component(registry, kind, spec, *context)


def _check_signature(
    component: Any, implementation: Any, context: Sequence[Any], arguments: Mapping[str, Any]
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
            f"{component.kind} {component.name!r} from {component.provider} does not accept "
            f"arguments its schema allows ({exc}): the plugin's schema and constructor "
            "disagree; plugtrain.testing.check_plugin_contract reports such mismatches"
        )
        raise PluginLoadError(message) from exc


def _optimizer_factory(registry: Registry, spec: Mapping[str, Any]) -> Any:
    ((name, arguments),) = spec.items()
    arguments = dict(arguments or {})
    filters = arguments.get("params")
    exclude = arguments.get("exclude_from_weight_decay", True)
    rest = {k: v for k, v in arguments.items() if k not in OPTIMIZER_TRAINER_KEYS}

    def make(model: Any) -> Any:
        from plugtrain.train.params import build_param_groups

        groups = build_param_groups(model, filters, exclude_from_weight_decay=exclude)
        return build_component(registry, "optimizer", {name: rest}, groups)

    return make


def _backend_for(plan: TrainerPlan, shared: dict[str, Any]) -> Any:
    """One backend object per distinct backend configuration; the same type throughout."""
    from plugtrain.train.backends import backend as make_backend

    init = plan.init
    if init.get("backend") is not None:
        arguments = {k: v for k, v in init["backend"].items() if k != "backend_type"}
    else:
        arguments = {}
    key = repr((plan.backend_type, sorted(arguments.items(), key=repr)))
    if key not in shared:
        shared[key] = make_backend(plan.backend_type, **arguments)
    return shared[key]


def build_trainer(plan: TrainerPlan, registry: Registry, backends: dict[str, Any]) -> Any:
    """A :class:`~plugtrain.train.trainer.Trainer` for one validated trainer of a run file."""
    from plugtrain.train.checkpoint import plain
    from plugtrain.train.trainer import Trainer

    init = plan.init
    schedulers = [
        (lambda optimizer, spec=spec: build_component(registry, "scheduler", spec, optimizer))
        for spec in _scheduler_specs(init.get("schedulers"))
    ]
    return Trainer(
        backend=_backend_for(plan, backends),
        model_dir=init.get("model_dir", "./model_dir"),
        model=lambda: build_component(registry, "model", init["model"]),
        optimizer=_optimizer_factory(registry, init["optimizer"])
        if init.get("optimizer")
        else None,
        schedulers=schedulers,
        loop=init.get("loop"),
        checkpoint=init.get("checkpoint"),
        logging=init.get("logging"),
        seed=init.get("seed"),
        config=plain(init),
    )


def _scheduler_specs(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [value]
    return list(value)


def check_run_file(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, import_plugins: bool = False
) -> list[TrainerPlan]:
    """Load, override and validate a run file; imports no torch.

    :param import_plugins: import every module the file lists under ``plugins:`` (what ``fit``
        and ``validate`` do); by default only installed plugins or those named with ``-p``.
    """
    data = load_run_file(path, overrides)
    if isinstance(data, Mapping) and isinstance(data.get("plugins"), list):
        listed = [p for p in data["plugins"] if isinstance(p, str)]
        plugins.use_run_file_plugins(listed, import_local=import_plugins)
    return check_run(data, plugins.get_registry(), str(path))


def _ckpt_argument(section: Mapping[str, Any]) -> dict[str, Any]:
    return {"ckpt_path": section["ckpt_path"]} if "ckpt_path" in section else {}


def run_file(
    path: str | os.PathLike[str], overrides: Sequence[str] = (), *, mode: str = "fit"
) -> list[dict[str, float]]:
    """Validate the whole file, then run its trainers in order.

    :param mode: ``"fit"`` runs each trainer's ``fit`` then its ``validate`` section;
        ``"validate"`` runs only ``validate`` sections (or evaluates ``fit.val_dataloader``).
    :returns: the final validation metrics of each trainer.
    """
    plans = check_run_file(path, overrides, import_plugins=True)
    registry = plugins.get_registry()
    backends: dict[str, Any] = {}
    results = []
    for plan in plans:
        trainer = build_trainer(plan, registry, backends)
        metrics: dict[str, float] = {}
        if mode == "fit" and plan.fit is not None:
            train = build_component(registry, "dataloader", plan.fit["train_dataloader"])
            val_spec = plan.fit.get("val_dataloader")
            val = build_component(registry, "dataloader", val_spec) if val_spec else None
            metrics = trainer.fit(train, val, **_ckpt_argument(plan.fit))
            _plot_schedules(plan, trainer)
        validate = plan.validate
        if validate is None and mode == "validate" and plan.fit and plan.fit.get("val_dataloader"):
            validate = {"val_dataloader": plan.fit["val_dataloader"]}
        if validate is not None:
            val = build_component(registry, "dataloader", validate["val_dataloader"])
            metrics = trainer.validate(val, **_ckpt_argument(validate))
        results.append(metrics)
    for backend in backends.values():
        close = getattr(backend, "close", None)
        if callable(close):  # e.g. leave a data-parallel process group together
            close()
    return results


def _plot_schedules(plan: TrainerPlan, trainer: Any) -> None:
    """Draw the run's schedules into ``model_dir/schedule.png`` when matplotlib is installed."""
    specs = _scheduler_specs(plan.init.get("schedulers"))
    if not specs or not trainer.is_main_process:
        return
    try:
        import matplotlib  # noqa: F401 - optional
    except ImportError:
        return
    from plugtrain.authoring.schedule_plot import plot_schedules

    target = Path(trainer.model_dir) / "schedule.png"
    optimizer = plan.init.get("optimizer")
    plot_schedules(specs, target, steps=trainer.global_step or None, optimizer=optimizer)
    log.info("schedule plot written to %s", target)
