"""Checkpoint converters: Hugging Face checkpoints in and out of plugtrain models.

Converters are components of kind ``checkpoint_converter``, registered through
``plugtrain_register_checkpoint_converters``; each is a :class:`CheckpointConverter`
declaration (config table, weight rules, transforms) on the shared engine.

:func:`open_checkpoint` is how every caller (the Trainer, ``check``, ``checkpoint convert``,
``generate``, ``lm_eval``) opens a Hugging Face checkpoint: its ``config.json`` is compared with
the caller's model before any shard is read, and :func:`read_checkpoint` reads the tensors.
The declarations, look-ups and opening import no torch; reading, :func:`hf_to_plugtrain` and
:func:`export_hf` do. :func:`build_for_loading` builds a model a checkpoint will fill on
``meta``, without initialising it, and :func:`fill_pending` gives what no checkpoint filled its
initial values (:mod:`plugtrain.conversion.meta_build`).
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
from plugtrain.conversion.from_config import model_keys_from_config
from plugtrain.conversion.opening import (
    ConfigMismatchError,
    ForeignCheckpoint,
    describe_difference,
    is_hf_checkpoint,
    open_checkpoint,
)

if TYPE_CHECKING:
    from plugtrain.conversion.engine import Converted, export_hf, hf_to_plugtrain, read_checkpoint
    from plugtrain.conversion.meta_build import build_for_loading, fill_pending

__all__ = [
    "FORMATS",
    "CheckpointConverter",
    "ConfigKey",
    "ConfigMismatchError",
    "ConversionContext",
    "ConversionError",
    "Converted",
    "ConverterArguments",
    "ForeignCheckpoint",
    "Transform",
    "WeightRule",
    "build_for_loading",
    "describe_difference",
    "export_hf",
    "fill_pending",
    "headless",
    "hf_to_plugtrain",
    "is_hf_checkpoint",
    "model_keys_from_config",
    "open_checkpoint",
    "read_checkpoint",
]

_ENGINE = {"Converted", "export_hf", "hf_to_plugtrain", "read_checkpoint"}
_META_BUILD = {"build_for_loading", "fill_pending"}


def __getattr__(name: str) -> Any:
    if name in _ENGINE:
        from plugtrain.conversion import engine

        return getattr(engine, name)
    if name in _META_BUILD:
        from plugtrain.conversion import meta_build

        return getattr(meta_build, name)
    raise AttributeError(f"module 'plugtrain.conversion' has no attribute {name!r}")
