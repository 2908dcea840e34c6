"""``--set a.b.c=VALUE`` overrides of a loaded run file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import yaml

from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["apply_overrides"]


def _parse(override: str) -> tuple[list[str], Any]:
    path, sep, text = override.partition("=")
    keys = list(path.strip().split("."))
    if not sep or not path.strip() or not all(keys):
        message = f"--set expects KEY.PATH=VALUE, got {override!r}"
        raise ConfigError([ConfigIssue("", message)])
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as exc:
        message = f"--set {path}: the value is not valid YAML: {exc}"
        raise ConfigError([ConfigIssue("", message)]) from None
    return keys, value


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
