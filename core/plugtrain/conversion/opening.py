"""Opening a Hugging Face checkpoint: the one way every command and the Trainer do it.

:func:`open_checkpoint` finds the weights files (opening none), reads ``config.json``, takes the
converter the caller names (else the one reading its ``model_type``) from the caller's
registry, converts the config to ``model:`` keys and compares them with the caller's model,
key by key. Only :func:`plugtrain.conversion.read_checkpoint` reads tensors, so a
``config.json`` that describes another model is refused before any shard is opened. Torch-free.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from plugtrain.conversion.configs import disagreements, hf_to_plugtrain_config, read_hf_config
from plugtrain.conversion.declaration import CheckpointConverter, ConversionError
from plugtrain.conversion.files import hf_config_file, hf_weight_files, is_hf_checkpoint
from plugtrain.conversion.lookup import complete_model_keys, find_converter, wrapped_converter
from plugtrain.errors import CheckpointMismatchError

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = [
    "ConfigMismatchError",
    "ForeignCheckpoint",
    "describe_difference",
    "is_hf_checkpoint",
    "open_checkpoint",
]


def describe_difference(key: str, theirs: Any, ours: Any) -> str:
    """The words for one key where ``config.json`` and the model differ (every caller's)."""
    return f"{key}: config.json has {theirs!r}, the model {ours!r}"


class ConfigMismatchError(CheckpointMismatchError, ConversionError):
    """A Hugging Face checkpoint's ``config.json`` describes another model than the caller's.

    :param config_file: the ``config.json`` read.
    :param differences: ``(dotted key, config.json's value, the model's value)`` for each key.
    """

    def __init__(self, config_file: Path, differences: Sequence[tuple[str, Any, Any]]) -> None:
        self.config_file = config_file
        self.differences = list(differences)
        listed = "; ".join(describe_difference(*difference) for difference in differences)
        super().__init__(f"{config_file}: does not describe this model: {listed}")


@attrs.frozen
class ForeignCheckpoint:
    """A Hugging Face checkpoint, opened: its config read and checked, no tensor read yet.

    :func:`plugtrain.conversion.read_checkpoint` reads its tensors.

    :param source: the folder or weights file given.
    :param config_file: its ``config.json``.
    :param hf_config: that file's contents, normalised.
    :param converter_key: the registered key of the converter that reads it (``"llama"``).
    :param converter: that converter's declaration (a decoder family's, under a wrapper).
    :param model_keys: the ``model:`` keys ``config.json`` converts to (without ``name``; the
        decoder's under a wrapper).
    :param dropped_config_keys: ``config.json`` keys the converter does not use.
    :param weight_files: the weights files, in reading order (none opened yet).
    :param registry: the caller's registry, which builds the model the tensors are read for.
    :param wrapper: the wrapping converter asked for (``dpo``), whose model holds the decoder
        ``converter`` reads; ``None`` when ``converter`` was asked for.
    """

    source: Path
    config_file: Path
    hf_config: dict[str, Any]
    converter_key: str
    converter: CheckpointConverter
    model_keys: dict[str, Any]
    dropped_config_keys: list[str]
    weight_files: tuple[Path, ...]
    registry: Registry = attrs.field(eq=False, repr=False)
    wrapper: CheckpointConverter | None = None

    @property
    def model_name(self) -> str:
        """The plugtrain model the checkpoint converts to (``model: {name: ...}``)."""
        return (self.wrapper or self.converter).model


def open_checkpoint(
    source: str | os.PathLike[str],
    registry: Registry,
    *,
    converter: str | None = None,
    model_keys: Mapping[str, Any] | None = None,
    config: str | os.PathLike[str] | None = None,
) -> ForeignCheckpoint:
    """Open the Hugging Face checkpoint at ``source`` for the caller's model (see the module).

    :param source: a folder, ``model.safetensors``, ``pytorch_model.bin`` or ``*.index.json``
        (:func:`is_hf_checkpoint` tells whether a path is one).
    :param registry: where the converter and the model are looked up (the caller's; there is
        no fallback).
    :param converter: the converter the caller's model names (its registered key or an alias);
        ``None``: the one that reads ``config.json``'s ``model_type``.
    :param model_keys: the caller's ``model:`` keys, compared with ``config.json``'s (defaults
        filled in by the model's schema); ``None``: no model to compare with.
    :param config: the ``config.json`` (default: the one beside ``source``).
    :raises ConfigMismatchError: ``config.json`` disagrees with ``model_keys`` (each key named
        with both values).
    :raises ConversionError: no ``config.json``, no weights, or a config the converter cannot
        read (naming the key).
    :raises UnknownNameError: ``converter`` is not registered.
    """
    source = Path(source)
    folder = source if source.is_dir() else source.parent
    config_file = Path(config) if config is not None else hf_config_file(folder)
    hf = read_hf_config(config_file)
    if config_file.is_dir():
        config_file = config_file / "config.json"
    key, declaration = find_converter(registry, converter, hf)
    wrapper = None
    if declaration.wraps is not None:
        section, wrapper = declaration.wraps.section, declaration
        _, declaration = wrapped_converter(registry, key, wrapper, hf=hf)
        if model_keys is not None:
            model_keys = model_keys.get(section) or {}
    theirs, dropped = hf_to_plugtrain_config(declaration, hf)
    if model_keys is not None:
        ours = complete_model_keys(registry, declaration.model, _without_name(model_keys))
        differences = disagreements(theirs, ours)
        if differences:
            raise ConfigMismatchError(config_file, differences)
    files = tuple(hf_weight_files(source))
    return ForeignCheckpoint(
        source, config_file, hf, key, declaration, theirs, dropped, files, registry, wrapper
    )


def _without_name(keys: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in keys.items() if k != "name"}
