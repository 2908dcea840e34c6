"""Rprop: torch's update rule with cstorch's defaults."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import RpropArgs

__all__ = ["Rprop"]


class Rprop(PlugtrainOptimizer):
    """Resilient backpropagation (torch's rule).

    Per element, ``s = sign(g * g_prev)``: the step size is multiplied by ``etaplus`` (s > 0),
    ``etaminus`` (s < 0) or 1 and clamped to ``step_sizes``; where s < 0 the gradient counts as
    0; ``p -= sign(g) * step_size``. Step sizes start at the group's lr at construction. The
    sign masks are per-tensor boolean temporaries (a quarter of a float32 parameter's size).
    """

    schema = RpropArgs
    name = "Rprop"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, zero previous gradient, step sizes at lr."""
        state["step"] = self.new_step()
        state["prev"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        lr = as_float(group["lr"])
        state["step_size"] = torch.full_like(param, lr, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Rprop step over ``params``."""
        etaminus, etaplus = (as_float(e) for e in group["etas"])
        low, high = (as_float(s) for s in group["step_sizes"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["prev"] for s in states], [s["step_size"] for s in states]]
        lists.append([s["step"] for s in states])
        for ops, (ps, gs, prevs, sizes, steps), _ in self.runs(group, lists):
            self.advance(ops, steps)
            signs, factors = self.scratch(ps, 0), self.scratch(ps, 1)
            ops.copy_(signs, gs)
            ops.mul_t_(signs, prevs)
            ops.sign_(signs)
            for sign, factor, size, g, prev in zip(signs, factors, sizes, gs, prevs, strict=True):
                down = sign < 0
                factor.fill_(1.0)
                factor.masked_fill_(sign > 0, etaplus)
                factor.masked_fill_(down, etaminus)
                size.mul_(factor).clamp_(low, high)
                prev.copy_(g)
                prev.masked_fill_(down, 0)
            ops.copy_(factors, prevs)
            ops.sign_(factors)
            ops.addcmul_(ps, factors, sizes, -1.0)
