"""Validating a whole run file against the registered schemas, before anything is built.

Every problem is collected, each with its dotted path (``trainer.init.optimizer.AdamW.lr``)
and, for values read from a file, its ``file:line:column``. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from plugtrain.config.nesting import nested_scheduler_problems
from plugtrain.config.sections import (
    FitSection,
    InitSection,
    RunFile,
    TrainerSection,
    ValidateSection,
)
from plugtrain.config.yaml_loader import LocatedDict, location_of
from plugtrain.errors import ConfigError, ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.registry import Registry
from plugtrain.schema import arg_infos, check_arguments

__all__ = ["TrainerPlan", "check_run", "render_path"]

Path = tuple[str | int, ...]

OPTIMIZER_TRAINER_KEYS = ("params", "exclude_from_weight_decay")
"""Keys under an optimizer that the Trainer handles (parameter tagging), not the optimizer."""


def render_path(path: Path) -> str:
    """``("trainer", 0, "init")`` -> ``"trainer[0].init"``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


@attrs.frozen
class TrainerPlan:
    """One validated trainer of a run file.

    :param path: where it is in the file (``trainer`` or ``trainer[1].trainer``).
    :param init: the ``init`` mapping.
    :param fit: the ``fit`` mapping, if any.
    :param validate: the ``validate`` mapping, if any.
    :param backend_type: the backend type it asks for (registered name).
    """

    path: str
    init: Mapping[str, Any]
    fit: Mapping[str, Any] | None
    validate: Mapping[str, Any] | None
    backend_type: str


class _Checker:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.issues: list[ConfigIssue] = []

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
    ) -> None:
        """Check ``mapping`` against ``schema``, then its sections and nested components.

        ``parent[name]`` is ``mapping``: where a value that is not a mapping is reported.
        """
        if not isinstance(mapping, Mapping):
            where = mapping if parent is None else parent
            self.add(path, f"must be a mapping, got {type(mapping).__name__}", where, name)
            return
        for key, message in check_arguments(schema, mapping):
            if key and key in mapping:
                is_key_problem = message.startswith(("unknown argument", f"'{key}' and"))
                self.add((*path, key), message, mapping, key, of_key=is_key_problem)
            elif key:
                self.add((*path, key), message, mapping)
            else:
                self.add(path, message, mapping)
        by_name = {info.name: info for info in arg_infos(schema)}
        for key, value in mapping.items():
            info = by_name.get(key)
            if info is None or value is None:
                continue
            section = _section(schema, key)
            if section is not None and isinstance(value, Mapping):
                self.schema(section, value, (*path, key))
            elif info.component is not None:
                self.components(info.component, value, (*path, key), mapping, key, many=info.many)

    def components(
        self, kind: str, value: Any, path: Path, parent: Any, key: Any, *, many: bool
    ) -> None:
        if many and isinstance(value, Sequence) and not isinstance(value, str):
            for index, item in enumerate(value):
                self.component(kind, item, (*path, index), value, index)
        elif (many and isinstance(value, Mapping)) or not many:
            self.component(kind, value, path, parent, key)

    def component(self, kind: str, spec: Any, path: Path, parent: Any, index: Any) -> None:
        """Check one ``{Name: {arguments}}``; already-built objects (from Python) pass."""
        if not isinstance(spec, Mapping):
            if isinstance(spec, str):
                self.add(path, f"write the {kind} as {{{spec}: {{...arguments}}}}", parent, index)
            else:
                self.add(path, "must be a one-key mapping {Name: {arguments}}", parent, index)
            return
        if len(spec) != 1:
            names = ", ".join(map(str, spec)) or "nothing"
            message = f"a {kind} is a one-key mapping {{Name: {{arguments}}}}, got keys: {names}"
            self.add(path, message, spec)
            return
        ((name, arguments),) = spec.items()
        try:
            component = self.registry.lookup(kind, name)
        except (UnknownNameError, DuplicateNameError) as exc:
            self.add((*path, str(name)), str(exc), spec, name, of_key=True)
            return
        if arguments is None:
            arguments = _no_arguments(spec, name)
        if not isinstance(arguments, Mapping):
            message = f"arguments of {name} must be a mapping, got {type(arguments).__name__}"
            self.add((*path, name), message, spec, name)
            return
        if kind == "optimizer":
            self.tagging(arguments, (*path, name))
            arguments = _without(arguments, OPTIMIZER_TRAINER_KEYS)
        before = len(self.issues)
        self.schema(component.schema_class, arguments, (*path, name))
        if kind == "scheduler" and len(self.issues) == before:  # children a wrapper refuses
            for below, message, container, key in nested_scheduler_problems(
                self.registry, str(name), component.schema_class, arguments, spec
            ):
                self.add((*path, name, *below), message, container, key, of_key=True)

    def tagging(self, arguments: Mapping[str, Any], path: Path) -> None:
        """Check the optimizer's ``params:`` filters (parameter tagging) structurally."""
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
            return
        items = [filters] if isinstance(filters, Mapping) else filters
        if not isinstance(items, Sequence) or isinstance(items, str):
            message = "must be a list of {params: GLOB or [GLOB...], tag: NAME}"
            self.add((*path, "params"), message, arguments, "params")
            return
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
            globs = item.get("params")
            if isinstance(globs, str):
                globs = [globs]
            if not globs or not all(isinstance(g, str) and g for g in globs):
                self.add((*where, "params"), "must be a glob or a list of globs", item, "params")
            if not isinstance(item.get("tag"), str) or not item.get("tag"):
                self.add((*where, "tag"), "every filter needs a tag (a string)", item, "tag")

    def backend_type(self, init: Mapping[str, Any], path: Path) -> str | None:
        """Check ``device`` or ``backend`` and return the registered backend type."""
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
            if found is not None:
                arguments = _without(backend, ("backend_type",))
                self.schema(found.schema_class, arguments, (*path, "backend"))
                return str(found.name)
            return None
        name = device if device is not None else "CPU"
        if not isinstance(name, str):
            return None
        found = self._backend(name, (*path, "device"), init, "device")
        return found.name if found is not None else None

    def _backend(self, name: str, path: Path, container: Any, key: str) -> Any:
        try:
            return self.registry.lookup("backend", name)
        except (UnknownNameError, DuplicateNameError) as exc:
            self.add(path, str(exc), container, key)
            return None


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


def check_run(data: Any, registry: Registry, source: str = "<run>") -> list[TrainerPlan]:
    """Validate a loaded run file; return one plan per trainer.

    :param data: the parsed YAML (from :func:`plugtrain.config.load_run_file`).
    :param registry: the registry to resolve names with (its plugins already loaded).
    :raises ConfigError: listing every problem with its path and position.
    """
    checker = _Checker(registry)
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
    for path, entry, parent in _trainer_entries(data, checker):
        checker.schema(TrainerSection, entry, path, parent, "trainer")
        if not isinstance(entry, Mapping) or not isinstance(entry.get("init"), Mapping):
            continue
        init = entry["init"]
        backend_type = checker.backend_type(init, (*path, "init"))
        if backend_type is None:
            continue
        backend_types.append(((*path, "init"), backend_type, init))
        plans.append(
            TrainerPlan(
                render_path(path), init, entry.get("fit"), entry.get("validate"), backend_type
            )
        )
        if entry.get("fit") is not None:
            _check_fit_needs(checker, init, (*path, "init"))
    _check_one_backend_type(checker, backend_types)
    if checker.issues:
        raise ConfigError(checker.issues)
    return plans


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
