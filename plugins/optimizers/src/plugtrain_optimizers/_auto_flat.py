"""Whether a param group takes the flat layout when ``flat`` is left at its default (``None``).

The flat layout (:class:`~plugtrain_optimizers._blocks.FlatLayout`) moves parameters into one
buffer: the same numbers, one kernel per operation instead of one per tensor. It is the default
only where moving them can change nothing anyone can observe and where it pays:

- every parameter is contiguous and the only tenant of its storage, with no other tensor (a
  view, a ``.data`` alias, another optimizer's buffer) sharing that storage, so that no alias
  can go stale when the data moves;
- no parameter is a DTensor (FSDP2 owns a shard's storage);
- the group holds at least two tensors per device and dtype, small on average (at most
  :data:`SMALL_TENSOR` elements), where the per-tensor cost of each operation (about 1 us
  against some 25 us for a pass over 64K float32 elements, measured in ``bench/``) shows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["SMALL_TENSOR", "flatten_by_default", "sole_tenant"]

SMALL_TENSOR = 1 << 16
"""Largest mean element count of a group's tensors that is flattened by default."""


def _uses(t: torch.Tensor) -> int:
    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


def sole_tenant(t: torch.Tensor) -> bool:
    """Whether ``t`` is contiguous, spans its whole storage and no other tensor shares it."""
    if not t.is_contiguous() or t.storage_offset() != 0:
        return False
    if t.untyped_storage().nbytes() != t.numel() * t.element_size():
        return False
    # A fresh tensor's count, taken the same way, is what "no one else" reads as.
    return _uses(t) == _uses(torch.empty(1, device=t.device))


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor"


def flatten_by_default(params: Sequence[torch.Tensor]) -> bool:
    """Whether a group of dense ``params`` (all requiring gradients) is flattened by default."""
    if not params or any(_is_dtensor(p) for p in params):
        return False  # a DTensor's shard lives in FSDP2's own storage: it must stay there
    counts: dict[tuple[torch.device, torch.dtype], int] = {}
    for p in params:
        counts[p.device, p.dtype] = counts.get((p.device, p.dtype), 0) + 1
    if min(counts.values()) < 2:
        return False
    if sum(p.numel() for p in params) > SMALL_TENSOR * len(params):
        return False
    return all(sole_tenant(p) for p in params)
