"""Lamb with the numerics of cstorch 2.10."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import LambArgs

__all__ = ["Lamb"]


class Lamb(PlugtrainOptimizer):
    """Lamb as cstorch computes it (no bias correction).

    ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g^2``; ``r = m / (sqrt(v) + eps) + wd p``;
    ``trust = clamp(|p|, 0, 10) / |r|`` (1 if either norm is 0, or with ``adam=True``);
    ``p -= lr * trust * r``. Norms are computed in float32 (float64 for float64 parameters).
    """

    schema = LambArgs
    name = "Lamb"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero moments."""
        state["step"] = self.new_step()
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Lamb step over ``params``."""
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        lists.append([s["step"] for s in states])
        for ops, (ps, gs, ms, vs, steps), _ in self.runs(group, lists):
            self.advance(ops, steps)
            ops.lerp_(ms, gs, 1 - beta1)
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            ratio = self.scratch(ps, 0)
            ops.copy_(ratio, vs)
            ops.sqrt_(ratio)
            ops.add_scalar_(ratio, eps)
            ops.reciprocal_(ratio)
            ops.mul_t_(ratio, ms)
            if wd != 0:
                ops.add_(ratio, ps, alpha=wd)
            if group["adam"]:
                ops.add_(ps, ratio, alpha=-lr)
                continue
            weight_norms = ops.norms(ps)
            ratio_norms = ops.norms(ratio)
            ops.mul_(ratio, [_trust(w, r) for w, r in zip(weight_norms, ratio_norms, strict=True)])
            ops.add_(ps, ratio, alpha=-lr)


def _trust(weight_norm: float, ratio_norm: float) -> float:
    weight_norm = min(weight_norm, 10.0)
    if weight_norm > 0 and ratio_norm > 0:
        return weight_norm / ratio_norm
    return 1.0
