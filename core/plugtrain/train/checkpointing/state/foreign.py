"""Checkpoints plugtrain did not write: a Hugging Face folder, and Model Zoo's unprefixed names.

A ``ckpt_path`` naming a Hugging Face folder (or its weights file) is converted on the fly by
the model's checkpoint converter, one shard in memory at a time, after its ``config.json`` is
compared with the model's keys (:func:`plugtrain.conversion.open_checkpoint`); what loads is
the model's state alone (step 0, a fresh optimizer), as from a weights-only checkpoint.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from plugtrain.errors import CheckpointError

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = ["hf_checkpoint_state", "is_hf_checkpoint", "with_model_prefix"]

log = logging.getLogger("plugtrain")


def is_hf_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a Hugging Face folder or weights file."""
    from plugtrain.conversion import is_hf_checkpoint as found

    return found(path)


def hf_checkpoint_state(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    registry: Registry,
    model_name: str | None = None,
    owned: set[str] | None = None,
) -> dict[str, Any]:
    """``{"model": state}`` of the Hugging Face checkpoint at ``path``, for ``model``.

    Opened by :func:`plugtrain.conversion.open_checkpoint` with the converter the model names
    (its ``checkpoint_converter``, else the name it is registered under, as ``plugtrain check``
    takes it) and its ``model_keys``, so that a ``config.json`` describing another model is
    refused before any shard is read.

    Each tensor comes converted to the type the model holds it in, in memory of its own (see
    :func:`plugtrain.conversion.read_checkpoint`): a model built for loading keeps them. A
    weight the model may hold in bfloat16 stays bfloat16 where the file holds it so.

    :param registry: the registry the converter and the model are found in.
    :param model_name: the model's registered name, where the run file gave it.
    :param owned: given, receives the names of the tensors in memory of their own.
    :raises CheckpointError: the model names no converter, or the checkpoint does not convert.
    :raises CheckpointMismatchError: ``config.json`` disagrees with the model's keys (each key
        named with both values).
    """
    from plugtrain.conversion import (
        ConfigMismatchError,
        ConversionError,
        open_checkpoint,
        read_checkpoint,
    )
    from plugtrain.conversion.meta_build.bfloat16 import bfloat16_names

    converter = getattr(model, "checkpoint_converter", None) or model_name
    if converter is None:
        message = (
            f"{path}: is a Hugging Face checkpoint, but the model ({type(model).__name__}) names "
            "no checkpoint converter (its checkpoint_converter attribute, or the registered "
            "name of a model built from a run file)"
        )
        raise CheckpointError(message)
    keys = getattr(model, "model_keys", None)
    try:
        opened = open_checkpoint(
            path,
            registry,
            converter=converter,
            model_keys=keys if isinstance(keys, Mapping) else None,
        )
        dtypes = {n: t.dtype for n, t in model.state_dict().items() if t.is_floating_point()}
        kept = bfloat16_names(model)  # frozen weights the model may hold in bfloat16
        converted = read_checkpoint(opened, dtypes=dtypes, bfloat16_kept=kept)
    except ConfigMismatchError:
        raise
    except ConversionError as exc:
        raise CheckpointError(f"{path}: cannot be converted: {exc}") from exc
    log.info("converted the Hugging Face checkpoint %s (%s converter)", path, converted.converter)
    if owned is not None:
        owned.update(converted.owned)
    from plugtrain._version import __version__

    # converted here, by this version: nothing for the version check to warn about
    return {"model": converted.state, "metadata": {"plugtrain": __version__}}


def with_model_prefix(model: torch.nn.Module, weights: Mapping[str, Any]) -> Mapping[str, Any]:
    """``weights`` named as ``model`` names them.

    Model Zoo writes a converted checkpoint without the ``model.`` prefix and loads it into
    ``trainer.model.model``; this does the same. Where a model's ``checkpoint_aliases`` pairs two
    prefixes that name the same tensors, the name a checkpoint lacks is filled from the other.
    A model with a ``checkpoint_weights(weights)`` method names the weights its own way first
    (DPO's policy and reference both read one decoder's checkpoint).
    """
    rename = getattr(model, "checkpoint_weights", None)
    if callable(rename):
        weights = rename(weights)
    inner = getattr(model, "model", None)
    unprefixed = weights and not any(name.startswith("model.") for name in weights)
    if isinstance(inner, torch.nn.Module) and unprefixed:
        expected = model.state_dict().keys()
        prefixed = {f"model.{name}": value for name, value in weights.items()}
        if len(prefixed.keys() & expected) > len(weights.keys() & expected):
            weights = prefixed
    aliases = getattr(model, "checkpoint_aliases", None) or {}
    if not aliases:
        return weights
    filled = dict(weights)
    for first, second in aliases.items():
        for have, lack in ((first, second), (second, first)):
            for name in [n for n in filled if n.startswith(have)]:
                filled.setdefault(lack + name[len(have) :], filled[name])
    return filled
