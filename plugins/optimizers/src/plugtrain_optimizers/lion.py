"""Lion with the numerics of cstorch 2.10."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import LionArgs

__all__ = ["Lion"]


class Lion(PlugtrainOptimizer):
    """Lion: ``p *= 1 - lr wd``; ``p -= lr sign(b1 m + (1 - b1) g)``; ``m = b2 m + (1 - b2) g``."""

    kernels_match_torch_path = True

    schema = LionArgs
    name = "Lion"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """A zero momentum."""
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Lion step over ``params``."""
        lr, wd = as_float(group["lr"]), as_float(group["weight_decay"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        lists = [params, grads, [self.state[p]["exp_avg"] for p in params]]
        scalars = [lr, 1 - lr * wd, 1 - beta1, 1 - beta2]
        if self.run_native(group, "lion_step", lists, scalars):
            return
        for ops, (ps, gs, ms), _ in self.blocks(group, lists):
            if wd != 0:
                ops.mul_(ps, 1 - lr * wd)
            direction = self.block_scratch(ps, 0)
            ops.lerp_into(direction, ms, gs, 1 - beta1)
            ops.sign_(direction)
            ops.add_(ps, direction, alpha=-lr)
            ops.lerp_(ms, gs, 1 - beta2)
