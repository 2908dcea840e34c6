"""The frozen base of a LoRA fit under bfloat16 autocast, held in bfloat16 where loaded so.

Under ``precision: {fp16_type: bfloat16}`` every matmul of a frozen Linear weight runs in
bfloat16: autocast casts the float32 weight to bfloat16 at every forward. Loaded from a
bfloat16 checkpoint (a published Hugging Face folder), that weight holds bfloat16 values, so
the cast is exact and holding it in bfloat16 computes the same, bit for bit, in half the memory
and without converting it at load. :func:`allow_bfloat16_base` marks those weights when the
model is built; the load decides, weight by weight, from the values it brings
(:mod:`plugtrain.conversion.meta_build.bfloat16`).

Marked: the weight of each ``nn.Linear`` (adapted or not) that does not train, in a run on one
process whose forward runs under bfloat16 autocast (not CSX, whose compiler casts). Not marked:
embedding tables (their rows feed the residual stream in float32, outside any matmul) and a head
that shares its weight with one, norm weights, biases, and every weight that trains.
``PLUGTRAIN_BF16_BASE=0`` marks nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from plugtrain.conversion.meta_build.bfloat16 import allow_bfloat16, bfloat16_base_enabled

__all__ = ["allow_bfloat16_base", "bfloat16_base_weights"]


def _under_bfloat16_autocast(trainer: Any) -> bool:
    """Whether ``trainer`` runs its forward under bfloat16 autocast, on one process."""
    precision = getattr(trainer, "precision", None)
    if getattr(precision, "dtype", None) is not torch.bfloat16:
        return False
    strategy = getattr(trainer, "strategy", None)
    if getattr(strategy, "sharded_parameters", False):
        return False
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    processes = torch.distributed.get_world_size() if distributed else 1
    return processes == 1 and int(getattr(strategy, "world_size", 1)) == 1


def bfloat16_base_weights(model: nn.Module) -> list[nn.Parameter]:
    """The frozen ``nn.Linear`` weights of ``model`` that no embedding table shares."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    found: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if not isinstance(module, nn.Linear):
            continue
        weight = module.weight
        plain = type(weight) is nn.Parameter and not weight.requires_grad
        if plain and id(weight) not in tables and weight.dtype == torch.float32:
            found.setdefault(id(weight), weight)
    return list(found.values())


def allow_bfloat16_base(trainer: Any, model: nn.Module) -> int:
    """Mark ``model``'s frozen base weights to be held in bfloat16 where loaded so.

    Only when ``trainer`` runs under bfloat16 autocast (see the module); how many were marked.
    """
    if not (bfloat16_base_enabled() and _under_bfloat16_autocast(trainer)):
        return 0
    return allow_bfloat16(bfloat16_base_weights(model))
