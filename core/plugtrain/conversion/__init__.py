"""Checkpoint converters: Hugging Face checkpoints in and out of plugtrain models.

Converters are components of kind ``checkpoint_converter``, registered through
``plugtrain_register_checkpoint_converters``; each is a :class:`CheckpointConverter`
declaration (config table, weight rules, transforms) on the shared engine. The declarations and
look-ups import no torch; :func:`hf_to_plugtrain` and :func:`export_hf` do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugtrain.conversion.declaration import (
    FORMATS,
    CheckpointConverter,
    ConfigKey,
    ConversionContext,
    ConversionError,
    ConverterArguments,
    Transform,
    WeightRule,
    headless,
)

if TYPE_CHECKING:
    from plugtrain.conversion.engine import Converted, export_hf, hf_to_plugtrain

__all__ = [
    "FORMATS",
    "CheckpointConverter",
    "ConfigKey",
    "ConversionContext",
    "ConversionError",
    "Converted",
    "ConverterArguments",
    "Transform",
    "WeightRule",
    "export_hf",
    "headless",
    "hf_to_plugtrain",
]

_ENGINE = {"Converted", "export_hf", "hf_to_plugtrain"}


def __getattr__(name: str) -> Any:
    if name in _ENGINE:
        from plugtrain.conversion import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'plugtrain.conversion' has no attribute {name!r}")
