"""The ``sparsity:`` section of ``trainer.init``, torch-free.

It takes every form Model Zoo and cstorch take:

- absent or ``null``: no sparsity;
- a float: one ``Static`` group at that level with the default parameter filter;
- a mapping: one group; a list of mappings: one group per entry, in order (a parameter goes
  to the first group whose filter matches it);
- cstorch's "config class" shape ``{groups: <mapping or list>}``, where each entry's
  ``params:`` keys are merged up into the entry.

A group names its ``algorithm`` (default ``static``, matched like every registered name, so
case-insensitively; ``type`` is its deprecated spelling), its ``param_filter`` (a glob or a
list of globs) and the algorithm's arguments, which its registered schema checks. ``schedule``
is an alias of ``sparsity``. A group whose ``sparsity`` is ``null`` sparsifies nothing and is
dropped (with a warning). A top-level ``sparsity:`` (Model Zoo's legacy place) may hold
``add_summaries``, which switches on the ``LogSparsity`` callback.

Each group becomes a :class:`~plugtrain.config.plan.SparsityGroupSpec` of the trainer's plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from plugtrain.bases.hyperparams import HyperParameterError
from plugtrain.bases.hyperparams import make_schedule as _make_schedule
from plugtrain.bases.hyperparams import make_update_schedule as _make_update_schedule
from plugtrain.config.plan import ComponentSpec, SparsityGroupSpec, plain
from plugtrain.config.reading.yaml_loader import LocatedDict, LocatedList, location_of
from plugtrain.config.validation.checker import render_path
from plugtrain.errors import ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.registry._suggest import did_you_mean

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = ["DEFAULT_ALGORITHM", "SparsitySection", "sparsity_section"]

DEFAULT_ALGORITHM = "static"
"""The algorithm of a group that names none (Model Zoo's default)."""

TYPE_DEPRECATED = "The 'type' key is deprecated, please use 'algorithm' instead"
"""cstorch's warning for ``type:`` in place of ``algorithm:``."""

BOTH_NAMES = "Cannot specify both 'sparsity' and 'schedule' in the same config"
"""cstorch's and Model Zoo's error for a group giving its level under both names."""

SUMMARIES_KEY = "add_summaries"
"""Model Zoo's legacy switch of the ``LogSparsity`` callback."""

Path = tuple[str | int, ...]


class _Checker(Protocol):
    """What this module needs of :mod:`plugtrain.config.validation.validate`'s checker."""

    registry: Registry
    issues: list[ConfigIssue]

    def add(
        self,
        path: Path,
        message: str,
        container: Any = None,
        key: Any = None,
        *,
        of_key: bool = False,
    ) -> None: ...

    def warn(self, path: Path, message: str, container: Any = None, key: Any = None) -> None: ...

    def schema(
        self, schema: type, mapping: Any, path: Path, parent: Any = None, name: Any = None
    ) -> dict[str, Any] | None: ...


@attrs.frozen
class SparsitySection:
    """A checked ``sparsity:`` section.

    :param groups: the groups in order (empty: no sparsity).
    :param log_sparsity: the ``LogSparsity`` callback that a legacy ``add_summaries`` switched
        on, else ``None``.
    """

    groups: tuple[SparsityGroupSpec, ...] = ()
    log_sparsity: ComponentSpec | None = None


def _expected(value: Any) -> str:
    got = f"{type(value).__name__} {value!r}"
    message = f"Expected sparsity to be a float, dict, or list of dicts. Got: {got}"
    if isinstance(value, int) and not isinstance(value, bool):
        message += (
            f" (an int is not a level: write {float(value)!r} for one Static group at that "
            "level, or leave sparsity out to train dense)"
        )
    return message


def sparsity_section(
    checker: _Checker, parent: Any, key: Any, path: Path, *, legacy: bool = False
) -> SparsitySection:
    """Check ``parent[key]``, the ``sparsity:`` section, reporting every problem to ``checker``.

    :param path: the section's path (``("trainer", "init", "sparsity")``).
    :param legacy: the section is a run file's top-level ``sparsity:`` (where ``add_summaries``
        may switch on ``LogSparsity``).
    """
    value = parent.get(key) if isinstance(parent, Mapping) else None
    if value is None:
        return SparsitySection()
    summaries: list[tuple[Path, Any, Any]] = []
    if legacy:
        value = _without_summaries(value, path, summaries)
    entries = _entries(checker, value, parent, key, path)
    groups = []
    for entry_path, entry, entry_parent, entry_key in entries:
        group = _group(checker, entry, entry_path, entry_parent, entry_key)
        if group is not None:
            groups.append(group)
    log = None
    if any(plain(flag) for _, flag, _ in summaries):
        where, _, container = next(s for s in summaries if plain(s[1]))
        log = _log_sparsity(checker, where, container)
    return SparsitySection(tuple(groups), log)


def _without_summaries(value: Any, path: Path, found: list[tuple[Path, Any, Any]]) -> Any:
    """``value`` with every ``add_summaries`` taken out (recorded in ``found``)."""
    if isinstance(value, Mapping):
        kept = _copy_mapping(value, exclude=(SUMMARIES_KEY,))
        if SUMMARIES_KEY in value:
            found.append(((*path, SUMMARIES_KEY), value[SUMMARIES_KEY], value))
        for name, item in value.items():
            if name != SUMMARIES_KEY and isinstance(item, Mapping | list):
                kept[name] = _without_summaries(item, (*path, name), found)
        return kept
    if isinstance(value, list):
        items = [_without_summaries(v, (*path, i), found) for i, v in enumerate(value)]
        copied = LocatedList(items)
        copied.mark = getattr(value, "mark", None)
        copied.item_marks = list(getattr(value, "item_marks", []))
        return copied
    return value


def _copy_mapping(mapping: Mapping[Any, Any], exclude: Sequence[str] = ()) -> LocatedDict:
    copied = LocatedDict((k, v) for k, v in mapping.items() if k not in exclude)
    copied.mark = getattr(mapping, "mark", None)
    copied.key_marks.update(getattr(mapping, "key_marks", {}))
    copied.value_marks.update(getattr(mapping, "value_marks", {}))
    return copied


_Entry = tuple[Path, Any, Any, Any]


def _entries(checker: _Checker, value: Any, parent: Any, key: Any, path: Path) -> list[_Entry]:
    """``(path, group mapping, container, key in container)`` of each group written."""
    if isinstance(value, float):
        group = LocatedDict({"sparsity": value})
        where = getattr(parent, "value_marks", {}).get(key)
        group.mark = where
        if where is not None:
            group.key_marks["sparsity"] = group.value_marks["sparsity"] = where
        return [(path, group, parent, key)]
    if isinstance(value, Mapping):
        if "groups" in value:
            return _config_class_entries(checker, value, path)
        return [(path, value, parent, key)]
    if isinstance(value, list | tuple):
        if not value:
            message = (
                "an empty list has no sparsity groups; leave sparsity out (or write null) to "
                "train dense"
            )
            checker.add(path, message, parent, key)
            return []
        found: list[_Entry] = []
        for index, item in enumerate(value):
            if isinstance(item, Mapping):
                found.append(((*path, index), item, value, index))
            else:
                message = f"each sparsity group is a mapping, got {type(item).__name__} {item!r}"
                checker.add((*path, index), message, value, index)
        return found
    checker.add(path, _expected(value), parent, key)
    return []


def _config_class_entries(checker: _Checker, value: Mapping[str, Any], path: Path) -> list[_Entry]:
    """The ``{groups: ...}`` shape of cstorch: each entry with its ``params:`` merged up."""
    for other in value:
        if other != "groups":
            message = (
                f"unknown key {other!r} beside 'groups' (with groups:, every group's settings "
                "go in its entry)"
            )
            checker.add((*path, str(other)), message, value, other, of_key=True)
    groups = value["groups"]
    where = (*path, "groups")
    if isinstance(groups, Mapping):
        items: list[tuple[Path, Any, Any, Any]] = [(where, groups, value, "groups")]
    elif isinstance(groups, list) and groups:
        items = [((*where, i), g, groups, i) for i, g in enumerate(groups)]
    else:
        message = f"groups must be a mapping or a non-empty list of mappings, got {groups!r}"
        checker.add(where, message, value, "groups")
        return []
    found: list[_Entry] = []
    for entry_path, entry, container, index in items:
        if not isinstance(entry, Mapping):
            message = f"each sparsity group is a mapping, got {type(entry).__name__} {entry!r}"
            checker.add(entry_path, message, container, index)
            continue
        merged = _merged_params(checker, entry, entry_path)
        if merged is not None:
            found.append((entry_path, merged, container, index))
    return found


def _merged_params(checker: _Checker, entry: Mapping[str, Any], path: Path) -> Any:
    params = entry.get("params")
    if params is None:
        return _copy_mapping(entry, exclude=("params",))
    if not isinstance(params, Mapping):
        message = f"params must be a mapping of group settings, got {type(params).__name__}"
        checker.add((*path, "params"), message, entry, "params")
        return None
    merged = _copy_mapping(entry, exclude=("params",))
    for name, item in params.items():
        if name in merged:
            message = f"{name!r} is written both in the group and in its params; give it once"
            checker.add((*path, "params", str(name)), message, params, name, of_key=True)
            return None
        merged[name] = item
        for marks, source in (
            (merged.key_marks, getattr(params, "key_marks", {})),
            (merged.value_marks, getattr(params, "value_marks", {})),
        ):
            if name in source:
                marks[name] = source[name]
    return merged


def _group(
    checker: _Checker, entry: Mapping[str, Any], path: Path, parent: Any, key: Any
) -> SparsityGroupSpec | None:
    """Check one group; its spec, or ``None`` when it has a problem or sparsifies nothing."""
    before = len(checker.issues)
    if SUMMARIES_KEY in entry:
        message = (
            f"{SUMMARIES_KEY} is Model Zoo's legacy switch (a top-level sparsity:); in "
            "trainer.init write callbacks: [LogSparsity: {}] to log sparsity"
        )
        checker.add((*path, SUMMARIES_KEY), message, entry, SUMMARIES_KEY, of_key=True)
    algorithm = _algorithm(checker, entry, path)
    param_filter = _param_filter(checker, entry, path)
    both = "sparsity" in entry and "schedule" in entry
    if both:
        checker.add((*path, "schedule"), BOTH_NAMES, entry, "schedule", of_key=True)
    if algorithm is None or both:
        return None
    level_key = "sparsity" if "sparsity" in entry else "schedule"
    if level_key in entry and entry[level_key] is None:
        message = f"{level_key} is null: this group sparsifies nothing and is left out"
        checker.warn((*path, level_key), message, entry, level_key)
        return None
    handled = ("algorithm", "type", "param_filter", SUMMARIES_KEY)
    arguments = _copy_mapping(entry, exclude=handled)
    schema = algorithm.schema_class
    checker.schema(schema, arguments, path, parent, key)
    _place_schedule_problems(checker, schema, arguments, before)
    if len(checker.issues) > before:
        return None
    written = plain(dict(arguments))
    if "schedule" in written:
        written["sparsity"] = written.pop("schedule")
    return SparsityGroupSpec(
        algorithm=str(algorithm.name),
        arguments=written,
        param_filter=param_filter,
        path=render_path(path),
        location=location_of(parent, key) if parent is not None else location_of(entry),
    )


def _algorithm(checker: _Checker, entry: Mapping[str, Any], path: Path) -> Any:
    """The registered algorithm ``algorithm`` (or the deprecated ``type``) names."""
    key = "algorithm"
    if "type" in entry:
        if "algorithm" in entry:
            message = (
                "'type' is the deprecated spelling of 'algorithm'; give only 'algorithm' "
                f"(here algorithm: {entry['algorithm']!r}, type: {entry['type']!r})"
            )
            checker.add((*path, "type"), message, entry, "type", of_key=True)
            return None
        checker.warn((*path, "type"), TYPE_DEPRECATED, entry, "type")
        key = "type"
    name = entry.get(key, DEFAULT_ALGORITHM)
    if not isinstance(name, str) or not name:
        message = f"{key} must be the name of a sparsity algorithm, got {name!r}"
        checker.add((*path, key), message, entry, key)
        return None
    try:
        return checker.registry.lookup("sparsity", name)
    except (UnknownNameError, DuplicateNameError) as exc:
        message = str(exc)
        known = checker.registry.names("sparsity")
        if isinstance(exc, UnknownNameError) and known:
            hint = did_you_mean(name, known)
            message = (
                f"Unsupported sparsity algorithm: {name!r}.{hint} Supported algorithms "
                f"(any case): {', '.join(sorted(known))}."
            )
        if key in entry:
            checker.add((*path, key), message, entry, key)
        else:
            message = f"{message} (a group without 'algorithm' is {DEFAULT_ALGORITHM})"
            checker.add(path, message, entry)
        return None


def _param_filter(
    checker: _Checker, entry: Mapping[str, Any], path: Path
) -> tuple[str, ...] | Callable[[str, Any], bool] | None:
    """``param_filter``: a glob, a list of globs or (from Python) a callable ``(name, param)``."""
    if "param_filter" not in entry or entry["param_filter"] is None:
        return None
    value = entry["param_filter"]
    where = (*path, "param_filter")
    if callable(value) and not isinstance(value, str):
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        globs: list[Any] = [value]
    elif isinstance(value, list | tuple):
        globs = list(value)
    else:
        message = f"filter must be a string or list of strings, got {type(value).__name__}"
        checker.add(where, message, entry, "param_filter")
        return None
    if not globs:
        checker.add(where, "an empty list of globs matches no parameter", entry, "param_filter")
        return None
    for index, glob in enumerate(globs):
        if not isinstance(glob, str) or not glob:
            message = f"each glob is a non-empty string, got {type(glob).__name__} {glob!r}"
            if isinstance(value, list):
                checker.add((*where, index), message, value, index)
            else:
                checker.add(where, message, entry, "param_filter")
            return None
    return tuple(globs)


def _place_schedule_problems(
    checker: _Checker, schema: type, arguments: Mapping[str, Any], before: int
) -> None:
    """Point a schedule's or an update's problem at the key inside its mapping."""
    names = list(getattr(schema, "schedules", ()))
    update = getattr(schema, "update_argument", None)
    for written, value in arguments.items():
        canonical = "sparsity" if written == "schedule" else written
        if not isinstance(value, Mapping) or canonical not in (*names, update):
            continue
        build = _make_update_schedule if canonical == update else _make_schedule
        try:
            build(value)
        except HyperParameterError as exc:
            inner = exc.key
            if inner is None or inner not in value:
                continue
            location = location_of(value, inner, of_key=exc.unknown_key)
            for index in range(before, len(checker.issues)):
                issue = checker.issues[index]
                if issue.message == str(exc):
                    checker.issues[index] = ConfigIssue(f"{issue.path}.{inner}", str(exc), location)


def _log_sparsity(checker: _Checker, path: Path, container: Any) -> ComponentSpec | None:
    try:
        found = checker.registry.lookup("callback", "LogSparsity")
    except (UnknownNameError, DuplicateNameError) as exc:
        checker.add(path, f"{SUMMARIES_KEY} switches on LogSparsity: {exc}", container)
        return None
    where = location_of(container, SUMMARIES_KEY)
    return ComponentSpec("callback", str(found.name), {}, render_path(path), where)
