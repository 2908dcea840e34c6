"""``--set a.b.c=VALUE`` overrides of a loaded run file.

A value is read by the run files' own loader (:func:`~.yaml_loader.load_yaml`), so it meets the
same limits: plain YAML only, no alias bombs, at most :data:`~.yaml_loader.MAX_DEPTH` levels of
nesting counting the key path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from plugtrain.config.reading.yaml_loader import MAX_DEPTH, LocatedDict, Mark, load_yaml
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["apply_overrides"]


def _parse(override: str) -> tuple[list[str], Any]:
    path, sep, text = override.partition("=")
    keys = list(path.strip().split("."))
    if not sep or not path.strip() or not all(keys):
        message = f"--set expects KEY.PATH=VALUE, got {override!r}"
        raise ConfigError([ConfigIssue("", message)])
    if len(keys) > MAX_DEPTH:
        message = f"--set: the key path has {len(keys)} levels; nesting deeper than {MAX_DEPTH}"
        raise ConfigError([ConfigIssue("", message)])
    source = _source(path)
    try:
        value = load_yaml(text, source) if text.strip() else None
    except ConfigError as exc:
        issue = exc.issues[0]
        where = (issue.location or "").removeprefix(source).lstrip(":")
        at = f" (at line {where.replace(':', ', column ', 1)} of the value)" if where else ""
        message = f"--set {path}: the value is not valid YAML: {issue.message}{at}"
        raise ConfigError([ConfigIssue("", message)]) from None
    depth = len(keys) + _depth(value)
    if depth > MAX_DEPTH:
        message = (
            f"--set {path}: nesting deeper than {MAX_DEPTH} levels "
            f"({len(keys)} in the key path, {depth - len(keys)} in the value)"
        )
        raise ConfigError([ConfigIssue("", message)])
    return keys, value


def _source(path: str) -> str:
    """What positions inside a ``--set`` value are relative to: ``--set a.b:LINE:COLUMN``."""
    return f"--set {path.strip()}"


def _depth(value: Any) -> int:
    """Levels of lists and mappings in ``value`` (0 for a scalar); iterative, so never deep."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        current, level = stack.pop()
        if isinstance(current, Mapping):
            children: Iterable[Any] = current.values()
        elif isinstance(current, list):
            children = current
        else:
            deepest = max(deepest, level)
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def _assign(target: Any, keys: list[str], value: Any, override: str) -> None:
    for key in keys[:-1]:
        if not isinstance(target, MutableMapping):
            message = f"--set {override!r}: {key!r} is not inside a mapping"
            raise ConfigError([ConfigIssue("", message)])
        if target.get(key) is None:
            target[key] = {}
        target = target[key]
    if not isinstance(target, dict):
        message = f"--set {override!r}: cannot set {keys[-1]!r} inside a non-mapping"
        raise ConfigError([ConfigIssue("", message)])
    target[keys[-1]] = value
    if isinstance(target, LocatedDict):  # point at the --set, not at the value it replaced
        mark = Mark(_source(override.partition("=")[0]), 0, 0)
        target.value_marks[keys[-1]] = mark
        target.key_marks.setdefault(keys[-1], mark)


def apply_overrides(data: Any, overrides: Iterable[str]) -> Any:
    """Apply each ``a.b.c=VALUE`` (VALUE parsed as YAML) to ``data`` in place and return it.

    A path starting with ``trainer.`` applies to every trainer of a list of trainers.
    """
    if data is None:
        data = {}
    for override in overrides:
        keys, value = _parse(override)
        trainer = data.get("trainer") if isinstance(data, Mapping) else None
        if keys[0] == "trainer" and isinstance(trainer, list) and len(keys) > 1:
            for item in trainer:
                if isinstance(item, dict) and isinstance(item.get("trainer"), dict):
                    _assign(item["trainer"], keys[1:], value, override)
        else:
            _assign(data, keys, value, override)
    return data
