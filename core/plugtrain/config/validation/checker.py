"""The checker that validates one run file: it collects every problem with its position.

:class:`Checker` validates components (``{Name: {arguments}}`` and Model Zoo's
``{name: X, ...}`` spellings), tagging, removals of default components and the backend, and
keeps the problems and warnings; :mod:`.validate` walks the file's sections
with it. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from plugtrain.config.plan import (
    BackendPlan,
    ComponentSpec,
    OptimizerPlan,
    ParamFilter,
    RemovedDefault,
    plain,
)
from plugtrain.config.reading.yaml_loader import LocatedDict, LocatedList, location_of
from plugtrain.config.validation.modelzoo_models import (
    DEPRECATED_NAME_KEY,
    no_port_message,
    without_model_name,
)
from plugtrain.config.validation.nesting import nested_scheduler_problems
from plugtrain.errors import ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.registry.components import Registry
from plugtrain.registry.kinds import KINDS
from plugtrain.registry.schema import (
    ArgInfo,
    arg_infos,
    argument_problems,
)

__all__ = [
    "DEPRECATED_MARK",
    "MODEL_ZOO_DEFAULT_LR",
    "NAME_KEYS",
    "OPTIMIZER_TRAINER_KEYS",
    "REMOVABLE_KINDS",
    "Checker",
    "Path",
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


class Checker:
    """Validates the parts of one run file, collecting problems and warnings."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.issues: list[ConfigIssue] = []
        self.warnings: list[ConfigIssue] = []
        self.run_file = False  # a run file takes Model Zoo's defaults (lr), Python does not

    def warn(self, path: Path, message: str, container: Any = None, key: Any = None) -> None:
        """Keep a warning about ``path``, at the position of ``container[key]`` when given."""
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
        """Keep a problem about ``path``, at its position in the file when known."""
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
            if info is not None and value is None and info.required and info.component:
                message = f"a {info.component} is required here, {{Name: {{arguments}}}}; got null"
                self.add((*path, key), message, mapping, key)
                continue
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
        if kind == "model" and "from_config" in arguments:
            from plugtrain.config.validation.model_source import expand_from_config

            arguments = expand_from_config(self, str(name), arguments, (*path, name))
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
            f"no lr written: Model Zoo's default {MODEL_ZOO_DEFAULT_LR} is used where no LR "
            "scheduler sets the learning rate"
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
    from plugtrain.registry.schema import section_of

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
