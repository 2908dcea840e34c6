"""Validating a whole run file against the registered schemas, once, into its plan.

Every problem is collected, each with its dotted path (``trainer.init.optimizer.AdamW.lr``)
and, for values read from a file, its ``file:line:column``; a file without problems becomes a
:class:`~plugtrain.config.plan.RunPlan`. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from plugtrain.config.modelzoo_models import (
    DEPRECATED_NAME_KEY,
    no_port_message,
    without_model_name,
)
from plugtrain.config.nesting import nested_scheduler_problems
from plugtrain.config.plan import (
    BackendPlan,
    ComponentSpec,
    FitPlan,
    OptimizerPlan,
    ParamFilter,
    RemovedDefault,
    RunPlan,
    SparsityGroupSpec,
    TrainerPlan,
    ValidateAllPlan,
    ValidatePlan,
    plain,
)
from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.sections import (
    CheckpointSettings,
    FitSection,
    InitSection,
    LoggingSettings,
    LoopSettings,
    RunFile,
    TrainerSection,
    ValidateSection,
)
from plugtrain.config.sparsity import SparsitySection, sparsity_section
from plugtrain.config.yaml_loader import LocatedDict, LocatedList, location_of
from plugtrain.errors import ConfigError, ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.kinds import KINDS
from plugtrain.registry import Registry
from plugtrain.schema import (
    ArgInfo,
    arg_infos,
    argument_problems,
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

Path = tuple[str | int, ...]

OPTIMIZER_TRAINER_KEYS = ("params", "exclude_from_weight_decay", "adjust_learning_rate")
"""Keys under an optimizer that the Trainer handles (param groups), not the optimizer."""

MODEL_ZOO_DEFAULT_LR = 0.1
"""The learning rate Model Zoo gives an optimizer written without one (schedulers set it)."""

NAME_KEYS = {"model": "name", "dataloader": "data_processor"}
"""Model Zoo's other spelling of a component: ``{name: X, ...}`` for ``{X: {...}}``."""

DEPRECATED_MARK = "deprecated_name_mark"
"""Attribute of a model respelt from ``model_name:``: where that key was written."""

REMOVABLE_KINDS = ("callback", "logger")
"""Kinds whose lists take ``Name: null`` to remove a default one (as in Model Zoo)."""


def render_path(path: Path) -> str:
    """``("trainer", 0, "init")`` -> ``"trainer[0].init"``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


class _Checker:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        self.run_file = False  # a run file takes Model Zoo's defaults (lr), Python does not

    def warn(self, path: Path, message: str, container: Any = None, key: Any = None) -> None:
        where = location_of(container, key, of_key=True) if container is not None else None
        self.warnings.append(ConfigIssue(render_path(path), message, where))

    def add(
        self,
        path: Path,
        message: str,
        container: Any = None,
        key: Any = None,
        *,
        of_key: bool = False,
    ) -> None:
        where = location_of(container, key, of_key=of_key) if container is not None else None
        self.issues.append(ConfigIssue(render_path(path), message, where))

    def schema(
        self, schema: type, mapping: Any, path: Path, parent: Any = None, name: Any = None
    ) -> dict[str, Any] | None:
        """Check ``mapping`` against ``schema``, then its sections and nested components.

        ``parent[name]`` is ``mapping``: where a value that is not a mapping is reported.

        :returns: ``mapping`` in plain values, each nested component as a
            :class:`ComponentSpec` (``None`` when it is not a mapping).
        """
        if not isinstance(mapping, Mapping):
            where = mapping if parent is None else parent
            self.add(path, f"must be a mapping, got {type(mapping).__name__}", where, name)
            return None
        mapping = _respelt_components(schema, mapping)
        ignored = getattr(schema, "ignored_arguments", None) or {}
        if any(key in mapping for key in ignored):
            for key in ignored:
                if key in mapping:
                    self.warn((*path, key), f"has no effect: {ignored[key]}", mapping, key)
            mapping = _without(mapping, tuple(ignored))
        for key, message, of_key in argument_problems(schema, mapping):
            if key and key in mapping:
                self.add((*path, key), message, mapping, key, of_key=of_key)
            elif key:
                self.add((*path, key), message, mapping)
            else:
                self.add(path, message, mapping)
        by_name: dict[str, ArgInfo] = {}
        for argument in arg_infos(schema):
            by_name.update(dict.fromkeys((argument.name, *argument.aliases), argument))
        checked: dict[str, Any] = {}
        for key, value in mapping.items():
            info = by_name.get(key)
            checked[key] = plain(value)
            if info is None or value is None:
                continue
            section = _section(schema, info.name)
            if section is not None and isinstance(value, Mapping):
                checked[key] = self.schema(section, value, (*path, key))
            elif info.component is not None:
                checked[key] = self.components(
                    info.component, value, (*path, key), mapping, key, many=info.many
                )
        return checked

    def components(
        self, kind: str, value: Any, path: Path, parent: Any, key: Any, *, many: bool
    ) -> Any:
        """One component, or a list of them (``many``); ``None`` where one is malformed."""
        if many and isinstance(value, Sequence) and not isinstance(value, str):
            return [
                self.component(kind, item, (*path, index), value, index)
                for index, item in enumerate(value)
            ]
        if (many and isinstance(value, Mapping)) or not many:
            return self.component(kind, value, path, parent, key)
        return None

    def component(self, kind: str, spec: Any, path: Path, parent: Any, index: Any) -> Any:
        """Check one ``{Name: {arguments}}``.

        :returns: its :class:`ComponentSpec` (an :class:`OptimizerPlan` for an optimizer), or
            ``None`` when it is malformed.
        """
        if not isinstance(spec, Mapping):
            if isinstance(spec, str):
                self.add(path, f"write the {kind} as {{{spec}: {{...arguments}}}}", parent, index)
            else:
                self.add(path, "must be a one-key mapping {Name: {arguments}}", parent, index)
            return None
        spec = _named_spelling(kind, spec)
        if getattr(spec, DEPRECATED_MARK, None) is not None:
            self.warn_model_name(spec, path)
        if len(spec) != 1:
            names = ", ".join(map(str, spec)) or "nothing"
            message = f"a {kind} is a one-key mapping {{Name: {{arguments}}}}, got keys: {names}"
            self.add(path, message, spec)
            return None
        ((name, arguments),) = spec.items()
        if arguments is None and kind in REMOVABLE_KINDS:
            return self.removal(kind, name, path, spec, parent, index)
        try:
            component = self.registry.lookup(kind, name)
        except (UnknownNameError, DuplicateNameError) as exc:
            message = str(exc)
            if kind == "model" and isinstance(exc, UnknownNameError):
                message = no_port_message(str(name), self.registry.names(kind)) or message
            self.add((*path, str(name)), message, spec, name, of_key=True)
            return None
        if arguments is None:
            arguments = _no_arguments(spec, name)
        if not isinstance(arguments, Mapping):
            message = f"arguments of {name} must be a mapping, got {type(arguments).__name__}"
            self.add((*path, name), message, spec, name)
            return None
        tagging: tuple[tuple[ParamFilter, ...] | None, bool] = (None, True)
        factors: tuple[tuple[str, float], ...] = ()
        if kind == "optimizer":
            tagging = self.tagging(arguments, (*path, name))
            factors = self.lr_factors(arguments, (*path, name))
            arguments = _without(arguments, OPTIMIZER_TRAINER_KEYS)
            if self.run_file:
                arguments = self.default_lr(component.schema_class, arguments, (*path, name), spec)
        before = len(self.issues)
        checked = self.schema(component.schema_class, arguments, (*path, name))
        if kind == "scheduler" and len(self.issues) == before:  # children a wrapper refuses
            for below, message, container, key in nested_scheduler_problems(
                self.registry, str(name), component.schema_class, arguments, spec
            ):
                self.add((*path, name, *below), message, container, key, of_key=True)
        built = ComponentSpec(
            kind,
            str(name),
            checked or {},
            render_path(path),
            location_of(parent, index) if parent is not None else location_of(spec),
        )
        if kind == "optimizer":
            return OptimizerPlan(built, *tagging, adjust_learning_rate=factors)
        return built

    def warn_model_name(self, spec: Mapping[str, Any], path: Path) -> None:
        """Say once that Model Zoo's ``model_name:`` (respelt ``{X: {...}}``) is deprecated."""
        ((name, _arguments),) = spec.items()
        mark = getattr(spec, DEPRECATED_MARK)
        where = str(mark) if mark is not True else location_of(spec, name, of_key=True)
        message = f"is deprecated (as in Model Zoo): write name: {name}"
        self.warnings.append(ConfigIssue(render_path((*path, DEPRECATED_NAME_KEY)), message, where))

    def lr_factors(self, arguments: Mapping[str, Any], path: Path) -> tuple[tuple[str, float], ...]:
        """Check ``adjust_learning_rate: {name pattern: factor}``; the pairs, in order."""
        written = arguments.get("adjust_learning_rate")
        if written is None:
            return ()
        where = (*path, "adjust_learning_rate")
        if not isinstance(written, Mapping) or not written:
            message = "must be a mapping {name pattern: factor}, e.g. {decoder: 0.5}"
            self.add(where, message, arguments, "adjust_learning_rate")
            return ()
        found = []
        for pattern, factor in written.items():
            good = isinstance(factor, int | float) and not isinstance(factor, bool)
            if not isinstance(pattern, str) or not pattern:
                self.add((*where, str(pattern)), "a name pattern is a non-empty string", written)
            elif not good or not math.isfinite(factor) or factor < 0:
                message = f"a factor is a finite number >= 0, got {factor!r}"
                self.add((*where, pattern), message, written, pattern)
            else:
                found.append((pattern, float(factor)))
        return tuple(found)

    def default_lr(self, schema: type, arguments: Any, path: Path, spec: Any) -> Any:
        """An optimizer written without a learning rate gets Model Zoo's default, with a warning."""
        names = {"lr"}
        for info in arg_infos(schema):
            if info.name == "lr":
                names.update(info.aliases)
        if "lr" not in {info.name for info in arg_infos(schema)} or names & set(arguments):
            return arguments
        filled = _without(arguments, ())
        filled["lr"] = MODEL_ZOO_DEFAULT_LR
        message = (
            f"no lr written: Model Zoo's default {MODEL_ZOO_DEFAULT_LR} is used (the schedulers "
            "usually set the learning rate)"
        )
        self.warn(path, message, spec, path[-1])
        return filled

    def removal(
        self, kind: str, name: Any, path: Path, spec: Mapping[str, Any], parent: Any, index: Any
    ) -> RemovedDefault | None:
        """``Name: null`` in a callback or logger list: the default called ``Name`` is dropped."""
        defaults = KINDS[kind].defaults
        lowered = str(name).lower()
        match = next((d for d in defaults if d == name), None) or next(
            (d for d in defaults if d.lower() == lowered), None
        )
        where = location_of(parent, index) if parent is not None else location_of(spec)
        if match is not None:
            return RemovedDefault(kind, match, render_path(path), where)
        listed = ", ".join(defaults) or "none"
        try:
            self.registry.lookup(kind, name)
        except (UnknownNameError, DuplicateNameError) as exc:
            message = f"{exc} ({name}: null removes a default {kind}; defaults: {listed})"
        else:
            message = (
                f"{name} is not a default {kind}, so '{name}: null' has nothing to remove "
                f"(defaults: {listed}); write {name}: {{}} to use it with no arguments"
            )
        self.add((*path, str(name)), message, spec, name, of_key=True)
        return None

    def tagging(
        self, arguments: Mapping[str, Any], path: Path
    ) -> tuple[tuple[ParamFilter, ...] | None, bool]:
        """Check the optimizer's ``params:`` filters (parameter tagging) structurally.

        :returns: the filters (``None`` when none are written) and
            ``exclude_from_weight_decay``.
        """
        exclude = arguments.get("exclude_from_weight_decay", True)
        if not isinstance(exclude, bool):
            message = f"must be true or false, got {exclude!r}"
            self.add(
                (*path, "exclude_from_weight_decay"),
                message,
                arguments,
                "exclude_from_weight_decay",
            )
        filters = arguments.get("params")
        if filters is None:
            return None, exclude is not False
        items = [filters] if isinstance(filters, Mapping) else filters
        if not isinstance(items, Sequence) or isinstance(items, str):
            message = "must be a list of {params: GLOB or [GLOB...], tag: NAME}"
            self.add((*path, "params"), message, arguments, "params")
            return None, exclude is not False
        found = []
        for index, item in enumerate(items):
            where = (*path, "params", index)
            if not isinstance(item, Mapping):
                self.add(where, "each filter is a mapping {params: ..., tag: ...}", items, index)
                continue
            for key in item:
                if key not in ("params", "tag"):
                    self.add(
                        (*where, key),
                        f"unknown filter key {key!r} (use params and tag)",
                        item,
                        key,
                        of_key=True,
                    )
            written = item.get("params")
            globs: list[Any] = [written] if isinstance(written, str) else list(written or ())
            good_globs = bool(globs) and all(isinstance(g, str) and g for g in globs)
            if not good_globs:
                self.add((*where, "params"), "must be a glob or a list of globs", item, "params")
            tag = item.get("tag")
            if not isinstance(tag, str) or not tag:
                self.add((*where, "tag"), "every filter needs a tag (a string)", item, "tag")
            elif good_globs:
                found.append(ParamFilter(tuple(globs), tag))
        return tuple(found), exclude is not False

    def backend(self, init: Mapping[str, Any], path: Path) -> BackendPlan | None:
        """Check ``device`` or ``backend``; the plan of the backend it names."""
        device, backend = init.get("device"), init.get("backend")
        if device is not None and backend is not None:
            return None  # reported by InitSection.cross_check
        if backend is not None:
            if not isinstance(backend, Mapping):
                return None
            backend_type = backend.get("backend_type")
            if not isinstance(backend_type, str):
                self.add(
                    (*path, "backend", "backend_type"),
                    "missing backend_type (CPU, GPU or CSX)",
                    backend,
                )
                return None
            found = self._backend(
                backend_type, (*path, "backend", "backend_type"), backend, "backend_type"
            )
            if found is None:
                return None
            arguments = _without(backend, ("backend_type",))
            checked = self.schema(found.schema_class, arguments, (*path, "backend"))
            where = render_path((*path, "backend"))
            return BackendPlan(str(found.name), checked or {}, where, location_of(init, "backend"))
        name = device if device is not None else "CPU"
        if not isinstance(name, str):
            return None
        found = self._backend(name, (*path, "device"), init, "device")
        if found is None:
            return None
        where = render_path((*path, "device"))
        return BackendPlan(str(found.name), {}, where, location_of(init, "device"))

    def _backend(self, name: str, path: Path, container: Any, key: str) -> Any:
        try:
            return self.registry.lookup("backend", name)
        except (UnknownNameError, DuplicateNameError) as exc:
            self.add(path, str(exc), container, key)
            return None


def _respelt_components(schema: type, mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    """``mapping`` with its components in Model Zoo's other spellings written ``{X: {...}}``.

    ``{name: X, ...}`` and ``{data_processor: X, ...}`` become ``{X: {...}}``, and one data
    loader where a list of them is expected becomes a list of one (``val_dataloaders``).
    """
    changed: dict[str, Any] = {}
    for info in arg_infos(schema):
        if info.component not in NAME_KEYS or info.name not in mapping:
            continue
        value = mapping[info.name]
        if info.many and isinstance(value, Mapping) and info.component == "dataloader":
            single = LocatedList([value])
            single.mark = getattr(value, "mark", None)
            single.item_marks = [single.mark] if single.mark is not None else []
            value = single
        if isinstance(value, Mapping):
            respelt: Any = _named_spelling(info.component, value)
        elif isinstance(value, list):
            respelt = type(value)(
                _named_spelling(info.component, v) if isinstance(v, Mapping) else v for v in value
            )
            for attribute in ("mark", "item_marks"):
                if hasattr(value, attribute):
                    setattr(respelt, attribute, getattr(value, attribute))
        else:
            continue
        changed[info.name] = respelt
    if not changed:
        return mapping
    result = _without(mapping, ())
    result.update(changed)
    return result


def _named_spelling(kind: str, spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """``{name: X, a: 1}`` (a model) or ``{data_processor: X, ...}`` (data) as ``{X: {a: 1}}``.

    Model Zoo writes components both ways; positions are kept (``X`` is placed where its name
    is written).
    """
    deprecated = without_model_name(spec) if kind == "model" else None
    spec = spec if deprecated is None else deprecated
    key = NAME_KEYS.get(kind)
    if key is None or not isinstance(spec.get(key), str):
        return spec
    name = spec[key]
    arguments = _without(spec, (key,))
    respelt = LocatedDict({name: arguments})
    respelt.mark = getattr(spec, "mark", None)
    marks = getattr(spec, "value_marks", {})
    if key in marks:
        respelt.key_marks[name] = marks[key]
        respelt.value_marks[name] = respelt.mark or marks[key]
    if deprecated is not None:  # component() warns about it, where the path is known
        setattr(respelt, DEPRECATED_MARK, getattr(deprecated, "key_marks", {}).get(key, True))
    return respelt


def _section(schema: type, key: str) -> type | None:
    from plugtrain.schema import section_of

    return section_of(schema, key)


def _no_arguments(spec: Mapping[str, Any], name: Any) -> LocatedDict:
    """No arguments (``Name:`` followed by nothing), positioned where the null is written."""
    empty = LocatedDict()
    empty.mark = getattr(spec, "value_marks", {}).get(name) or getattr(spec, "mark", None)
    return empty


def _without(mapping: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    kept: dict[str, Any] = type(mapping)() if isinstance(mapping, dict) else {}
    kept.update((k, v) for k, v in mapping.items() if k not in keys)
    for attribute in ("key_marks", "value_marks", "mark"):  # keep the positions of a LocatedDict
        if hasattr(mapping, attribute):
            setattr(kept, attribute, getattr(mapping, attribute))
    return kept


def _trainer_entries(
    data: Mapping[str, Any], checker: _Checker
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


def plan_run(data: Any, registry: Registry, source: str = "<run>") -> RunPlan:
    """Validate a loaded run file once and return its plan.

    Validation reads the registry and changes nothing else: no plugin is loaded, no global
    setting touched.

    :param data: the parsed YAML (from :func:`plugtrain.config.load_run_file`).
    :param registry: the registry to resolve names with (its plugins already loaded); build
        the run with the same registry.
    :param source: the file's name, for messages.
    :raises ConfigError: listing every problem with its path and position.
    """
    checker = _Checker(registry)
    checker.run_file = True
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
    for path, entry, parent in _trainer_entries(data, checker):
        checked = checker.schema(TrainerSection, entry, path, parent, "trainer")
        if not isinstance(entry, Mapping) or not isinstance(entry.get("init"), Mapping):
            continue
        init = entry["init"]
        sparsity = _trainer_sparsity(checker, init, (*path, "init"), legacy, data)
        backend = checker.backend(init, (*path, "init"))
        if backend is None:
            continue
        backend_types.append(((*path, "init"), backend.backend_type, init))
        if entry.get("fit") is not None:
            _check_fit_needs(checker, init, (*path, "init"))
        if not checker.issues and checked is not None:
            plans.append(_trainer_plan(render_path(path), checked, backend, entry, sparsity))
    _check_one_backend_type(checker, backend_types)
    if checker.issues:
        raise ConfigError(checker.issues)
    modules = data.get("plugins") or ()
    return RunPlan(source, tuple(plans), tuple(str(m) for m in modules), tuple(checker.warnings))


def plan_component(registry: Registry, kind: str, spec: Any, path: str = "") -> ComponentSpec:
    """Validate one component written as ``{Name: {arguments}}`` (from Python) into its spec.

    :param path: where it is, for messages (default: the kind).
    :raises ConfigError: listing every problem.
    """
    checker = _Checker(registry)
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

    checker = _Checker(registry)
    found = sparsity_section(checker, {path: value}, path, (path,))
    if checker.issues:
        raise ConfigError(checker.issues)
    for warning in checker.warnings:
        warnings.warn(str(warning), UserWarning, stacklevel=2)
    return found.groups


def _legacy_sparsity(checker: _Checker, data: Mapping[str, Any]) -> SparsitySection | None:
    """A run file's top-level ``sparsity:`` (Model Zoo's legacy place), checked once."""
    if data.get("sparsity") is None:
        return None
    message = "a top-level sparsity is Model Zoo's legacy place; it applies to every trainer"
    checker.warn(("sparsity",), message, data, "sparsity")
    return sparsity_section(checker, data, "sparsity", ("sparsity",), legacy=True)


def _trainer_sparsity(
    checker: _Checker,
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
    loaders = section["val_dataloaders"]
    loaders = (loaders,) if isinstance(loaders, ComponentSpec) else tuple(loaders)
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
        fit=_fit_plan(fit, entry["fit"]) if fit is not None else None,
        validate=_validate_plan(validate, entry["validate"]) if validate is not None else None,
        validate_all=(
            _validate_all_plan(validate_all, entry["validate_all"])
            if validate_all is not None
            else None
        ),
        config=plain(entry["init"]),
    )


def _check_fit_needs(checker: _Checker, init: Mapping[str, Any], path: Path) -> None:
    if init.get("optimizer") is None:
        checker.add((*path, "optimizer"), "fit needs an optimizer", init)
    if init.get("loop") is None:
        checker.add(
            (*path, "loop"), "fit needs loop settings with max_steps, num_steps or num_epochs", init
        )


def _check_one_backend_type(checker: _Checker, found: list[tuple[Path, str, Any]]) -> None:
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
