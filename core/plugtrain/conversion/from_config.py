"""A model section that takes its shape from a Hugging Face folder: ``from_config: DIR``.

``model: {name: llama, from_config: ./llama3_hf}`` reads ``./llama3_hf/config.json`` through
the family's converter (the same key mapping ``checkpoint convert-config`` uses); keys written
beside ``from_config`` override the folder's and are checked as written. Torch-free: the
config validation reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plugtrain.config.validation.model_source import FROM_CONFIG, register_config_reader
from plugtrain.conversion.declaration import CheckpointConverter, ConversionError
from plugtrain.errors import UnknownNameError

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = ["FROM_CONFIG", "model_keys_from_config", "with_config_keys"]


def model_keys_from_config(registry: Registry, model: str, source: str) -> dict[str, Any]:
    """The ``model:`` keys of ``model`` that ``source``'s ``config.json`` converts to.

    :param model: the model's name; its converter is the one of that key, else the one that
        reads ``config.json``'s ``model_type``.
    :raises ConversionError: no readable ``config.json``, or no converter for it.
    """
    from plugtrain.conversion.configs import read_hf_config
    from plugtrain.conversion.lookup import find_converter

    try:
        _, converter = find_converter(registry, model, None)
    except UnknownNameError:
        _, converter = find_converter(registry, None, read_hf_config(source))
    return converter_keys(converter, source)


def converter_keys(converter: CheckpointConverter, source: str) -> dict[str, Any]:
    """The ``model:`` keys (without ``name``) ``converter`` reads from ``source``'s config.json.

    :raises ConversionError: no readable ``config.json``, a key the converter cannot read, or
        a converter whose section wraps another model's.
    """
    from plugtrain.conversion.configs import hf_to_plugtrain_config, read_hf_config

    if converter.wraps is not None:
        message = (
            f"{converter.model}: its section wraps another model's; write from_config under it"
        )
        raise ConversionError(message)
    keys, _ = hf_to_plugtrain_config(converter, read_hf_config(source))
    return {k: v for k, v in keys.items() if k != "name"}


register_config_reader(converter_keys)


def with_config_keys(registry: Registry, model: str, keys: Mapping[str, Any]) -> dict[str, Any]:
    """``keys`` with ``from_config`` replaced by the folder's keys (those written win)."""
    source = keys.get(FROM_CONFIG)
    given = {k: v for k, v in keys.items() if k != FROM_CONFIG}
    if not isinstance(source, str):
        return dict(keys)
    return {**model_keys_from_config(registry, model, source), **given}
