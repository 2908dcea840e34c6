"""``model: {name: X, from_config: DIR}``: the keys of a Hugging Face folder's ``config.json``.

The folder's keys (converted by the family's converter) fill the model's arguments; keys
written beside ``from_config`` win and are checked at their own lines; a key taken from the
folder that the schema refuses is reported at the ``from_config`` line. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from plugtrain.config.reading.yaml_loader import LocatedDict
from plugtrain.errors import PlugtrainError, UnknownNameError
from plugtrain.registry.components import Registry

__all__ = ["FROM_CONFIG", "expand_from_config", "register_config_reader"]

FROM_CONFIG = "from_config"
"""The model key naming a Hugging Face folder (or its ``config.json``)."""

CONVERTERS = "checkpoint_converter"
"""The component kind checkpoint converters are registered as."""


ConfigReader = Callable[[Any, str], dict[str, Any]]
"""``reader(converter, source)``: the model keys a converter reads from a ``config.json``."""

_READERS: list[ConfigReader] = []


def register_config_reader(reader: ConfigReader) -> None:
    """Give the reader of converters' ``config.json`` keys.

    ``plugtrain.conversion`` gives it when imported, which resolving any converter does.
    """
    if reader not in _READERS:
        _READERS.append(reader)


class _Checker(Protocol):
    registry: Registry

    def add(
        self, path: tuple[str | int, ...], message: str, container: Any = None, key: Any = None
    ) -> None: ...


def _keys(registry: Registry, model: str, source: str) -> dict[str, Any]:
    """The keys of ``model`` the folder's ``config.json`` gives, by the model's converter."""
    try:
        converter = registry.resolve(CONVERTERS, model)
    except UnknownNameError:
        found = [
            registry.resolve(CONVERTERS, n)
            for n in registry.names(CONVERTERS)
            if getattr(registry.resolve(CONVERTERS, n), "model", None) == model
        ]
        if not found:
            message = f"no checkpoint converter makes {model!r}; write its keys instead"
            raise PlugtrainError(message) from None
        converter = found[0]
    if not _READERS:  # unreachable once a converter is resolved: its module registers one
        raise PlugtrainError("no reader of config.json is registered (import plugtrain.conversion)")
    return _READERS[-1](converter, source)


def expand_from_config(
    checker: _Checker, name: str, arguments: Mapping[str, Any], path: tuple[str | int, ...]
) -> Mapping[str, Any]:
    """``arguments`` with ``from_config`` replaced by the folder's keys (those written win)."""
    source = arguments[FROM_CONFIG]
    expanded = LocatedDict((k, v) for k, v in arguments.items() if k != FROM_CONFIG)
    marks = getattr(arguments, "value_marks", {})
    expanded.mark = getattr(arguments, "mark", None)
    expanded.key_marks.update(getattr(arguments, "key_marks", {}))
    expanded.value_marks.update(marks)
    if not isinstance(source, str):
        message = "names a Hugging Face folder (or its config.json), a string"
        checker.add((*path, FROM_CONFIG), message, arguments, FROM_CONFIG)
        return expanded
    try:
        found = _keys(checker.registry, name, source)
    except (PlugtrainError, OSError, ValueError, TypeError, AttributeError) as exc:
        checker.add((*path, FROM_CONFIG), str(exc), arguments, FROM_CONFIG)
        return expanded
    where = marks.get(FROM_CONFIG)
    for key, value in found.items():
        if key not in expanded:
            expanded[key] = value
            if where is not None:
                expanded.key_marks[key] = expanded.value_marks[key] = where
    return expanded
