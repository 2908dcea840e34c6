"""Sharded (DTensor) state to and from the full tensors of a single-file checkpoint.

Under FSDP2 every parameter, and the optimizer state that mirrors it, is a DTensor holding this
process's shard. A single-file checkpoint stores full tensors, the same as a DDP run's, so the
two formats and strategies load each other's checkpoints: :func:`gathered` turns DTensors into
full tensors (a collective: every process calls it), :func:`model_shards` and
:func:`optimizer_shards` cut full tensors into the shards of this run's mesh.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

import torch

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

__all__ = ["gathered", "is_dtensor", "local_tensor", "model_shards", "optimizer_shards"]


def is_dtensor(value: Any) -> TypeGuard[DTensor]:
    """Whether ``value`` is a DTensor, without importing them (a second of every start-up).

    Until ``torch.distributed.tensor`` is imported no value can be one.
    """
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(value, module.DTensor)


def local_tensor(value: torch.Tensor) -> torch.Tensor:
    """The part of ``value`` this process holds (``value`` itself unless it is a DTensor)."""
    return value.to_local() if is_dtensor(value) else value


def gathered(value: Any, keep: bool = True) -> Any:
    """``value`` with every DTensor replaced by its full tensor, containers rebuilt.

    Every process must call it (one all-gather per DTensor). With ``keep`` false (a process
    that does not write) each full tensor is dropped as soon as it is gathered and the DTensor
    stays in its place, so that only the writer holds the whole state.
    """
    if is_dtensor(value):
        full = value.full_tensor()
        return full if keep else value
    if isinstance(value, Mapping):
        return {key: gathered(item, keep) for key, item in value.items()}
    if isinstance(value, list):
        return [gathered(item, keep) for item in value]
    return value


def _like(full: Any, template: Any) -> Any:
    """``full`` cut like the DTensor ``template`` (other values as they are)."""
    if not is_dtensor(template) or not isinstance(full, torch.Tensor):
        return full
    if is_dtensor(full) or tuple(full.shape) != tuple(template.shape):
        return full
    from torch.distributed.tensor import distribute_tensor

    device = template.device_mesh.device_type
    return distribute_tensor(full.to(device), template.device_mesh, template.placements)


def model_shards(model: torch.nn.Module, full: Mapping[str, Any]) -> dict[str, Any]:
    """A full model state dict cut into this process's shards of ``model``'s DTensors."""
    current = model.state_dict()
    return {key: _like(value, current.get(key)) for key, value in full.items()}


def optimizer_shards(optimizer: torch.optim.Optimizer, full: Mapping[str, Any]) -> dict[str, Any]:
    """A full optimizer state dict cut like the optimizer's (DTensor) parameters.

    Per-parameter state of the parameter's shape (moments) is sharded as the parameter is;
    scalars (``step``) and other shapes are kept as they are.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, entries in full["state"].items():
        param = params[index] if isinstance(index, int) and index < len(params) else None
        state[index] = {key: _like(value, param) for key, value in entries.items()}
    return {**full, "state": state}
