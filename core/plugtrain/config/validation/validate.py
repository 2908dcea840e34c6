"""Validating a whole run file against the registered schemas, once, into its plan.

Every problem is collected, each with its dotted path (``trainer.init.optimizer.AdamW.lr``)
and, for values read from a file, its ``file:line:column``; a file without problems becomes a
:class:`~plugtrain.config.plan.RunPlan`. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from plugtrain.config.plan import (
    BackendPlan,
    ComponentSpec,
    FitPlan,
    OptimizerPlan,
    RemovedDefault,
    RunPlan,
    SparsityGroupSpec,
    TrainerPlan,
    ValidateAllPlan,
    ValidatePlan,
    plain,
)
from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.reading.yaml_loader import location_of
from plugtrain.config.sections import (
    NOTHING_TO_DO,
    CheckpointSettings,
    FitSection,
    InitSection,
    LoggingSettings,
    LoopSettings,
    RunFile,
    TrainerSection,
    ValidateSection,
)
from plugtrain.config.speed import ProfileSettings
from plugtrain.config.validation.callback_plans import check_callback_plans
from plugtrain.config.validation.checker import Checker, Path, render_path
from plugtrain.config.validation.checkpoint_paths import check_checkpoint_paths
from plugtrain.config.validation.sharding import check_sharding
from plugtrain.config.validation.sparsity import SparsitySection, sparsity_section
from plugtrain.config.validation.vocabulary import check_vocabulary
from plugtrain.errors import ConfigError, ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.registry.components import Registry
from plugtrain.registry.schema import (
    check_arguments,
    validated_arguments,
)

_S = TypeVar("_S")

__all__ = [
    "TrainerPlan",
    "check_run",
    "plan_component",
    "plan_run",
    "plan_sparsity",
    "render_path",
]


def _trainer_entries(
    data: Mapping[str, Any], checker: Checker
) -> list[tuple[Path, Any, Mapping[str, Any]]]:
    """``(path, trainer, parent)`` of each trainer; ``parent["trainer"]`` is the trainer."""
    trainer = data.get("trainer")
    if isinstance(trainer, Mapping):
        return [(("trainer",), trainer, data)]
    if not isinstance(trainer, Sequence) or isinstance(trainer, str) or not trainer:
        checker.add(
            ("trainer",), "must be a mapping or a non-empty list of {trainer: ...}", data, "trainer"
        )
        return []
    entries: list[tuple[Path, Any, Mapping[str, Any]]] = []
    for index, item in enumerate(trainer):
        if not isinstance(item, Mapping) or list(item) != ["trainer"]:
            checker.add(
                ("trainer", index),
                "each list item must be {trainer: {init: ..., ...}}",
                trainer,
                index,
            )
            continue
        entries.append((("trainer", index, "trainer"), item["trainer"], item))
    return entries


WORK_SECTIONS = ("fit", "validate", "validate_all")
"""A trainer's sections that use its model (left out where only the model is wanted)."""


def _without_work(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each trainer's work sections left out (the rest is shared, not copied)."""

    def idle(trainer: Any) -> Any:
        if not isinstance(trainer, Mapping):
            return trainer
        return {key: value for key, value in trainer.items() if key not in WORK_SECTIONS}

    trainer = data.get("trainer")
    if isinstance(trainer, Mapping):
        return {**data, "trainer": idle(trainer)}
    if isinstance(trainer, list):
        entries = [
            {**item, "trainer": idle(item["trainer"])}
            if isinstance(item, Mapping) and list(item) == ["trainer"]
            else item
            for item in trainer
        ]
        return {**data, "trainer": entries}
    return dict(data)


def plan_run(
    data: Any, registry: Registry, source: str = "<run>", *, model_only: bool = False
) -> RunPlan:
    """Validate a loaded run file once and return its plan.

    Validation reads the registry and changes nothing else: no plugin is loaded, no global
    setting touched.

    :param data: the parsed YAML (from :func:`plugtrain.config.load_run_file`).
    :param registry: the registry to resolve names with (its plugins already loaded); build
        the run with the same registry.
    :param source: the file's name, for messages.
    :param model_only: plan what builds the trainers (``generate``, ``lm_eval``): their
        ``fit``, ``validate`` and ``validate_all`` sections are left out, unchecked.
    :raises ConfigError: listing every problem with its path and position.
    """
    checker = Checker(registry)
    checker.run_file = True
    if model_only and isinstance(data, Mapping):
        data = _without_work(data)
    if not isinstance(data, Mapping):
        got = "an empty file" if data is None else type(data).__name__
        raise ConfigError(
            [
                ConfigIssue(
                    "",
                    f"a run file is a mapping with 'trainer:', got {got}",
                    location_of(data) or f"{source}:1:1",
                )
            ]
        )
    for key, message in check_arguments(RunFile, data):
        checker.add(
            (key,) if key else (), message, data, key or None, of_key=message.startswith("unknown")
        )
    plans = []
    backend_types: list[tuple[Path, str, Any]] = []
    legacy = _legacy_sparsity(checker, data)
    checkpoint_folders: list[str] = []
    for path, entry, parent in _trainer_entries(data, checker):
        checked = checker.schema(TrainerSection, entry, path, parent, "trainer")
        if model_only:  # its model is what is wanted
            checker.issues = [issue for issue in checker.issues if issue.message != NOTHING_TO_DO]
        if not isinstance(entry, Mapping) or not isinstance(entry.get("init"), Mapping):
            continue
        init = entry["init"]
        check_checkpoint_paths(checker, entry, path, checkpoint_folders)
        sparsity = _trainer_sparsity(checker, init, (*path, "init"), legacy, data)
        backend = checker.backend(init, (*path, "init"))
        if backend is None:
            continue
        backend_types.append(((*path, "init"), backend.backend_type, init))
        check_sharding(checker, init, (*path, "init"), backend)
        if entry.get("fit") is not None:
            _check_fit_needs(checker, init, (*path, "init"))
        if not checker.issues and checked is not None:
            plan = _trainer_plan(render_path(path), checked, backend, entry, sparsity)
            check_vocabulary(checker, plan, init, (*path, "init"))
            check_callback_plans(checker, plan, init, (*path, "init"))
            plans.append(plan)
    _check_one_backend_type(checker, backend_types)
    if checker.issues:
        raise ConfigError(checker.issues)
    modules = data.get("plugins") or ()
    warnings = _without_covered_lr_warnings(checker.warnings, plans, registry)
    return RunPlan(source, tuple(plans), tuple(str(m) for m in modules), tuple(warnings))


NO_LR_WRITTEN = "no lr written"
"""How the warning about an optimizer without a learning rate begins (see ``default_lr``)."""


def _without_covered_lr_warnings(
    warnings: Sequence[ConfigIssue], plans: Sequence[TrainerPlan], registry: Registry
) -> list[ConfigIssue]:
    """Drop "no lr written" where an LR scheduler sets every group's rate anyway.

    Model Zoo's files write no ``lr`` because an untagged LR scheduler sets it from the first
    step; the default is then never used, and saying so on every run is noise.
    """
    covered = {
        f"{plan.path}.init.optimizer"
        for plan in plans
        if any(_sets_every_lr(spec, registry) for spec in plan.schedulers)
    }
    return [
        warning
        for warning in warnings
        if not (
            warning.message.startswith(NO_LR_WRITTEN)
            and any(warning.path.startswith(prefix) for prefix in covered)
        )
    ]


def _sets_every_lr(spec: Any, registry: Registry) -> bool:
    """Whether a scheduler spec writes ``lr`` into every param group (no tags)."""
    if not isinstance(spec, ComponentSpec) or spec.arguments.get("param_group_tags") is not None:
        return False
    try:
        schema = registry.lookup("scheduler", spec.name).schema_class
    except (UnknownNameError, DuplicateNameError):
        return False
    return getattr(schema, "schedule_key", "lr") == "lr"


def plan_component(registry: Registry, kind: str, spec: Any, path: str = "") -> ComponentSpec:
    """Validate one component written as ``{Name: {arguments}}`` (from Python) into its spec.

    :param path: where it is, for messages (default: the kind).
    :raises ConfigError: listing every problem.
    """
    checker = Checker(registry)
    where: Path = (path or kind,)
    found = checker.component(kind, spec, where, None, None)
    if checker.issues:
        raise ConfigError(checker.issues)
    return found.spec if isinstance(found, OptimizerPlan) else found


def plan_sparsity(
    registry: Registry, value: Any, path: str = "sparsity"
) -> tuple[SparsityGroupSpec, ...]:
    """Validate a ``sparsity`` value given from Python (``Trainer(sparsity=...)``) into groups.

    It takes every form a run file takes (a float, a group mapping, a list of them, cstorch's
    ``{groups: ...}``), plus what only Python can give: a callable ``init_method``,
    ``param_filter`` or schedule, and built schedules. Warnings (the deprecated ``type`` key,
    a ``null`` level) are issued with :func:`warnings.warn`.

    :raises ConfigError: listing every problem, as for a run file.
    """
    import warnings

    checker = Checker(registry)
    found = sparsity_section(checker, {path: value}, path, (path,))
    if checker.issues:
        raise ConfigError(checker.issues)
    for warning in checker.warnings:
        warnings.warn(str(warning), UserWarning, stacklevel=2)
    return found.groups


def _legacy_sparsity(checker: Checker, data: Mapping[str, Any]) -> SparsitySection | None:
    """A run file's top-level ``sparsity:`` (Model Zoo's legacy place), checked once."""
    if data.get("sparsity") is None:
        return None
    message = "a top-level sparsity is Model Zoo's legacy place; it applies to every trainer"
    checker.warn(("sparsity",), message, data, "sparsity")
    return sparsity_section(checker, data, "sparsity", ("sparsity",), legacy=True)


def _trainer_sparsity(
    checker: Checker,
    init: Mapping[str, Any],
    path: Path,
    legacy: SparsitySection | None,
    data: Mapping[str, Any],
) -> SparsitySection:
    """The trainer's ``init.sparsity``, or the legacy top-level one."""
    if legacy is None:
        return sparsity_section(checker, init, "sparsity", (*path, "sparsity"))
    if init.get("sparsity") is not None:
        message = (
            f"sparsity is written both at the top level (legacy) and in {render_path(path)}; "
            "keep only trainer.init.sparsity"
        )
        checker.add(("sparsity",), message, data, "sparsity", of_key=True)
    return legacy


def check_run(data: Any, registry: Registry, source: str = "<run>") -> list[TrainerPlan]:
    """Validate a loaded run file; return one plan per trainer (see :func:`plan_run`).

    :raises ConfigError: listing every problem with its path and position.
    """
    return list(plan_run(data, registry, source).trainers)


def _settings(cls: type[_S], value: Any, owner: str) -> _S | None:
    if value is None:
        return None
    return cls(**validated_arguments(cls, value, owner=owner))


def _schedulers(value: Any) -> tuple[Any, ...]:
    """A component list of the plan (schedulers, callbacks, loggers) as a tuple."""
    if value is None:
        return ()
    if isinstance(value, ComponentSpec | RemovedDefault):
        return (value,)
    return tuple(value)


def _fit_plan(fit: Mapping[str, Any], written: Mapping[str, Any]) -> FitPlan:
    return FitPlan(
        fit["train_dataloader"],
        fit.get("val_dataloader"),
        fit.get("ckpt_path"),
        "ckpt_path" in written,
    )


def _validate_plan(section: Mapping[str, Any], written: Mapping[str, Any]) -> ValidatePlan:
    return ValidatePlan(section["val_dataloader"], section.get("ckpt_path"), "ckpt_path" in written)


def _validate_all_plan(section: Mapping[str, Any], written: Mapping[str, Any]) -> ValidateAllPlan:
    loaders = section.get("val_dataloaders")
    loaders = (loaders,) if isinstance(loaders, ComponentSpec) else tuple(loaders or ())
    paths = section.get("ckpt_paths")
    if isinstance(paths, str):
        paths = (paths,)
    return ValidateAllPlan(
        loaders, tuple(paths) if paths is not None else None, "ckpt_paths" in written
    )


def _trainer_plan(
    path: str,
    checked: Mapping[str, Any],
    backend: BackendPlan,
    entry: Mapping[str, Any],
    sparsity: SparsitySection,
) -> TrainerPlan:
    """The typed plan of one trainer that passed validation (``checked`` is its plain form)."""
    init = checked["init"]
    callbacks = _schedulers(init.get("callbacks"))
    log = sparsity.log_sparsity
    if log is not None and not any(getattr(c, "name", None) == log.name for c in callbacks):
        callbacks = (*callbacks, log)
    fit, validate = checked.get("fit"), checked.get("validate")
    validate_all = checked.get("validate_all")
    return TrainerPlan(
        path=path,
        backend=backend,
        model=init["model"],
        optimizer=init.get("optimizer"),
        schedulers=_schedulers(init.get("schedulers")),
        model_dir=init.get("model_dir", "./model_dir"),
        seed=init.get("seed"),
        loop=_settings(LoopSettings, init.get("loop"), f"{path}.init.loop"),
        checkpoint=_settings(CheckpointSettings, init.get("checkpoint"), f"{path}.init.checkpoint"),
        logging=_settings(LoggingSettings, init.get("logging"), f"{path}.init.logging"),
        precision=_settings(PrecisionSettings, init.get("precision"), f"{path}.init.precision"),
        callbacks=callbacks,
        loggers=_schedulers(init.get("loggers")),
        sparsity=sparsity.groups,
        compile=init.get("compile", "off"),
        activation_checkpointing=init.get("activation_checkpointing", "off"),
        profile=_settings(ProfileSettings, init.get("profile"), f"{path}.init.profile"),
        fit=_fit_plan(fit, entry["fit"]) if fit is not None else None,
        validate=_validate_plan(validate, entry["validate"]) if validate is not None else None,
        validate_all=(
            _validate_all_plan(validate_all, entry["validate_all"])
            if validate_all is not None
            else None
        ),
        config=plain(entry["init"]),
    )


def _check_fit_needs(checker: Checker, init: Mapping[str, Any], path: Path) -> None:
    if init.get("optimizer") is None:
        checker.add((*path, "optimizer"), "fit needs an optimizer", init)
    if init.get("loop") is None:
        checker.add(
            (*path, "loop"), "fit needs loop settings with max_steps, num_steps or num_epochs", init
        )


def _check_one_backend_type(checker: Checker, found: list[tuple[Path, str, Any]]) -> None:
    if not found:
        return
    first_type = found[0][1]
    for path, backend_type, init in found[1:]:
        if backend_type != first_type:
            message = (
                "Cannot instantiate multiple backends. "
                f"A backend with type {first_type} has already been instantiated."
            )
            key = "backend" if "backend" in init else "device"
            checker.add((*path, key), message, init, key)


# Keep the section classes importable from here for callers that validate parts.
__all__ += ["FitSection", "InitSection", "ValidateSection"]
