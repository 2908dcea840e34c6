"""Element-wise updates of sharded (DTensor) parameters, run on each process's shards.

Under FSDP2 a parameter, its gradient and the state created like it are DTensors holding this
process's shard. An element-wise update (every output element depends on the same element of
its inputs only) gives the same numbers whether it runs on the whole tensor or on each shard,
so :func:`on_local_shards` hands :meth:`~PlugtrainOptimizer.update_group` the local tensors
(views of the shards' storage: the update lands in place). Updates that need a whole tensor
(a norm, a matrix's rows and columns) cannot run this way; their optimizers are refused.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["has_sharded_params", "on_local_shards"]


def _local(t: Any) -> Any:
    local = getattr(t, "_local_tensor", None)
    return t if local is None else local


def has_sharded_params(optimizer: torch.optim.Optimizer) -> bool:
    """Whether any parameter of ``optimizer`` is a DTensor."""
    return any(
        getattr(p, "_local_tensor", None) is not None
        for group in optimizer.param_groups
        for p in group["params"]
    )


@contextlib.contextmanager
def on_local_shards(optimizer: Any) -> Iterator[None]:
    """Within: ``optimizer``'s groups, gradients and state are those of the local shards.

    On exit the parameters and gradients are restored; state entries the update replaced
    (rather than changed in place) are written back into the DTensor state.
    """
    groups = optimizer.param_groups
    saved_params = [group["params"] for group in groups]
    state = optimizer.state
    by_local: dict[torch.Tensor, torch.Tensor] = {}
    local_state: defaultdict[torch.Tensor, dict[str, Any]] = defaultdict(dict)
    for group in groups:
        locals_ = []
        for p in group["params"]:
            local = _local(p)
            by_local[local] = p
            if p.grad is not None:
                local.grad = _local(p.grad)
            if p in state:
                local_state[local] = {k: _local(v) for k, v in state[p].items()}
            locals_.append(local)
        group["params"] = locals_
    optimizer.state = local_state
    optimizer._scratch_views, optimizer._block_views = None, {}
    try:
        yield
    finally:
        optimizer.state = state
        optimizer._scratch_views, optimizer._block_views = None, {}
        for group, params in zip(groups, saved_params, strict=True):
            group["params"] = params
        for local, p in by_local.items():
            local.grad = None
            entries = state[p]
            for key, value in local_state.get(local, {}).items():
                old = entries.get(key)
                if old is not None and _local(old) is value:
                    continue  # changed in place
                if old is not None and _local(old) is not old:
                    _local(old).copy_(value)  # a DTensor entry the update replaced
                else:
                    entries[key] = value
