"""A converter by key or by ``config.json``, and a model's keys by its schema (torch-free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plugtrain.conversion.declaration import CheckpointConverter, ConversionError
from plugtrain.errors import UnknownNameError

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = [
    "KIND",
    "complete_model_keys",
    "converters",
    "find_converter",
    "model_defaults",
    "wrapped_converter",
]

KIND = "checkpoint_converter"
"""The component kind converters are registered as."""


def converters(registry: Registry) -> dict[str, CheckpointConverter]:
    """Every registered converter by key (importing their declarations, which is cheap)."""
    return {name: _load(registry, name) for name in registry.names(KIND)}


def _load(registry: Registry, name: str) -> CheckpointConverter:
    converter = registry.resolve(KIND, name)
    if not isinstance(converter, CheckpointConverter):
        target = registry.lookup(KIND, name).target
        message = f"{target} (converter {name!r}) is not a CheckpointConverter"
        raise ConversionError(message)
    return converter


def find_converter(
    registry: Registry, name: str | None, hf: Mapping[str, Any] | None
) -> tuple[str, CheckpointConverter]:
    """The converter called ``name`` (an alias too), or the one for ``hf``'s architecture.

    :raises UnknownNameError: ``name`` is not registered (with the closest names).
    :raises ConversionError: no name, and no converter reads ``hf``'s ``model_type``.
    """
    if name is not None:
        component = registry.lookup(KIND, name)
        return component.name, _load(registry, component.name)
    model_type = (hf or {}).get("model_type")
    architectures = list((hf or {}).get("architectures") or [])
    candidates = [
        (key, c)
        for key, c in converters(registry).items()
        if model_type in c.hf_model_types and c.detected
    ]
    if not candidates:
        known = ", ".join(registry.names(KIND))
        message = (
            f"config.json: no converter reads model_type {model_type!r}; pass --model "
            f"(converters: {known})"
        )
        raise ConversionError(message)
    for key, converter in candidates:
        if converter.hf_architecture in architectures:
            return key, converter
    headed = [(k, c) for k, c in candidates if not c.is_headless]
    return (headed or candidates)[0]


def wrapped_converter(
    registry: Registry,
    key: str,
    converter: CheckpointConverter,
    *,
    hf: Mapping[str, Any] | None = None,
    keys: Mapping[str, Any] | None = None,
) -> tuple[str, CheckpointConverter]:
    """The decoder family's converter a wrapping converter ``key`` applies (see ``Wrapping``).

    Found from ``hf``'s ``model_type`` (import), else from the ``name`` of ``keys``'s section
    (export).

    :raises ConversionError: no converter reads the ``model_type``, or the section names none.
    """
    assert converter.wraps is not None
    section = converter.wraps.section
    if hf is not None:
        try:
            inner_key, inner = find_converter(registry, None, hf)
        except ConversionError as exc:
            message = (
                f"config.json: the {key!r} converter holds a decoder, and no converter reads "
                f"model_type {hf.get('model_type')!r}"
            )
            raise ConversionError(message) from exc
    else:
        keys_of_section = (keys or {}).get(section)
        name = keys_of_section.get("name") if isinstance(keys_of_section, Mapping) else None
        if not isinstance(name, str):
            raise ConversionError(f"the {key!r} model's {section} section names no model")
        try:
            inner_key, inner = find_converter(registry, name, None)
        except UnknownNameError as exc:
            message = f"{section}.name: no converter for model {name!r} (the {key!r} converter)"
            raise ConversionError(message) from exc
    if inner.wraps is not None:
        raise ConversionError(f"the {key!r} converter cannot hold {inner_key!r}, which wraps too")
    return inner_key, inner


def _schema(registry: Registry, model: str) -> type:
    schema: type = registry.lookup("model", model).schema_class
    return schema


def model_defaults(registry: Registry, model: str) -> dict[str, Any]:
    """Every ``model:`` key of ``model`` that has a default, with it."""
    from plugtrain.registry.schema import arg_infos

    return {i.name: i.default for i in arg_infos(_schema(registry, model)) if not i.required}


def complete_model_keys(registry: Registry, model: str, keys: Mapping[str, Any]) -> dict[str, Any]:
    """``keys`` checked against ``model``'s schema, with every default filled in.

    :raises ConfigError: naming each key the model does not accept.
    """
    from plugtrain.registry.schema import validated_arguments

    return validated_arguments(_schema(registry, model), keys, owner=model)
