"""Frozen weights held in bfloat16 where a checkpoint gives them bfloat16 values.

A parameter marked by :func:`allow_bfloat16` (the LoRA callback marks the frozen Linear weights
of a fit that runs under bfloat16 autocast) is a float32 parameter that may be held in
bfloat16 instead, for as long as the values it holds are bfloat16 values: a load that gives it
bfloat16 values (a bfloat16 Hugging Face folder, read as it is: :func:`bfloat16_names` tells
the reader which tensors to leave in the file's type) makes it a bfloat16 parameter first
(:func:`hold_in_bfloat16`), so that the values arrive in half the memory and no float32 copy of
them is ever made; a load of other values makes it float32 again. The forward computes the
same either way: autocast casts a float32 weight to bfloat16 before every matmul, and the cast
of a float32 tensor holding bfloat16 values is exact. The model's state holds them as they are
held (the same values; a float32 model loads them exactly). ``PLUGTRAIN_BF16_BASE=0`` marks
nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = [
    "allow_bfloat16",
    "bfloat16_base_enabled",
    "bfloat16_names",
    "hold_in_bfloat16",
]

BUILT_AS = "_plugtrain_built_as"
"""The attribute of a marked parameter: the type it was built in."""


def bfloat16_base_enabled() -> bool:
    """Whether frozen weights may be held in bfloat16 (``PLUGTRAIN_BF16_BASE``, on by default)."""
    return os.environ.get("PLUGTRAIN_BF16_BASE", "1") != "0"


def allow_bfloat16(parameters: Iterable[nn.Parameter]) -> int:
    """Mark float32 ``parameters`` to be held in bfloat16 where loaded so; how many were marked.

    Only for parameters that nothing trains and that every computation reads through a
    bfloat16 autocast matmul (see the module).
    """
    marked = 0
    for parameter in parameters:
        built = getattr(parameter, BUILT_AS, parameter.dtype)
        if built == torch.float32 and not parameter.requires_grad:
            setattr(parameter, BUILT_AS, built)
            marked += 1
    return marked


def _marked(model: nn.Module) -> dict[str, nn.Parameter]:
    """Each marked parameter of ``model`` under each of its names (a tied one under several)."""
    return {
        name: parameter
        for name, parameter in model.named_parameters(remove_duplicate=False)
        if hasattr(parameter, BUILT_AS)
    }


def bfloat16_names(model: nn.Module) -> frozenset[str]:
    """The state names of ``model``'s marked parameters: read those in bfloat16 when stored so."""
    return frozenset(_marked(model))


def _bfloat16_values(value: Any) -> bool:
    """Whether ``value`` is a plain tensor of bfloat16 values (bfloat16, or float32 of them)."""
    if type(value) is not torch.Tensor and type(value) is not nn.Parameter:
        return False
    if value.is_meta or value.dtype not in (torch.bfloat16, torch.float32):
        return False
    if value.dtype == torch.bfloat16:
        return True
    narrowed = value.to(torch.bfloat16)
    return bool(torch.equal(narrowed.to(torch.float32), value))


def hold_in_bfloat16(model: nn.Module, weights: Mapping[str, Any]) -> int:
    """Give ``model``'s marked parameters the types ``weights``, about to load, need.

    Each marked parameter they give bfloat16 values becomes bfloat16, each they give other
    values becomes its built type (float32); returned: how many are bfloat16 now. The
    parameter gets empty storage of its new type (the load fills it); a model built for
    loading then keeps a bfloat16 tensor read into memory of its own as it is
    (:func:`~plugtrain.conversion.meta_build.building.adopt`). A parameter ``weights`` lack
    keeps what it holds.
    """
    seen: set[int] = set()
    held = 0
    for name, parameter in _marked(model).items():
        if id(parameter) in seen or name not in weights:
            continue
        seen.add(id(parameter))
        built: torch.dtype = getattr(parameter, BUILT_AS)
        wanted = torch.bfloat16 if _bfloat16_values(weights[name]) else built
        if parameter.dtype != wanted:
            parameter.data = torch.empty(parameter.shape, dtype=wanted, device=parameter.device)
        held += int(wanted == torch.bfloat16)
    return held
