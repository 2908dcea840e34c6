"""Adafactor with the numerics and restrictions of cstorch 2.10."""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import AdafactorArgs

__all__ = ["Adafactor"]


class Adafactor(PlugtrainOptimizer):
    """Adafactor as cstorch supports it (no first moment, update clipping at 1, fixed lr).

    At step t: ``rho = lr * max(RMS(p), eps2)`` (``lr`` without ``scale_parameter``);
    ``b2t = 1 - t^decay_rate``; ``u = g^2 + eps1``. Tensors with 2 or more dimensions keep
    row and column averages of ``u`` (over the last two dimensions) and use
    ``rsqrt(row / mean(row)) (x) rsqrt(col) * g``; others keep a full average ``v`` and use
    ``rsqrt(v) * g``. Then ``update /= max(RMS(update), 1)``; ``p -= wd * rho * p``;
    ``p -= rho * update``. The factored statistics are computed per tensor in both paths.
    """

    schema = AdafactorArgs
    name = "Adafactor"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero second-moment statistics (factored for >= 2-D tensors)."""
        state["step"] = self.new_step()
        if param.dim() >= 2:
            state["exp_avg_sq_row"] = param.new_zeros(param.shape[:-1])
            state["exp_avg_sq_col"] = param.new_zeros(param.shape[:-2] + param.shape[-1:])
        else:
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adafactor step over ``params``."""
        lr, wd = as_float(group["lr"]), as_float(group["weight_decay"])
        eps1, eps2 = (as_float(e) for e in group["eps"])
        decay, clip = as_float(group["decay_rate"]), as_float(group["clip_threshold"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["step"] for s in states]]
        for ops, (ps, gs, steps), idx in self.runs(group, lists):
            ts = self.advance(ops, steps)
            roots = [math.sqrt(p.numel()) for p in ps]
            if group["scale_parameter"]:
                rms = [n / r for n, r in zip(ops.norms(ps), roots, strict=True)]
                rhos = [lr * max(x, eps2) for x in rms]
            else:
                rhos = [lr] * len(ps)
            betas = [1 - t**decay for t in ts]
            update = self.scratch(ps, 0)
            ops.copy_(update, gs)
            ops.mul_t_(update, gs)
            ops.add_scalar_(update, eps1)
            flat = [i for i, p in enumerate(ps) if p.dim() < 2]
            for i, p in enumerate(ps):
                if p.dim() >= 2:
                    _factored(states[idx[i]], update[i], gs[i], betas[i])
            if flat:
                u_, g_, b_ = self.take([update, gs, betas], flat)
                vs = [states[idx[i]]["exp_avg_sq"] for i in flat]
                ops.mul_(vs, b_)
                ops.mul_(u_, [1 - b for b in b_])
                ops.add_(vs, u_)
                ops.copy_(u_, vs)
                ops.rsqrt_(u_)
                ops.mul_t_(u_, g_)
            update_rms = [n / r for n, r in zip(ops.norms(update), roots, strict=True)]
            if wd != 0:
                ops.mul_(ps, [1 - wd * rho for rho in rhos])
            scales = [-rho / max(u / clip, 1.0) for rho, u in zip(rhos, update_rms, strict=True)]
            ops.mul_(update, scales)
            ops.add_(ps, update)


def _factored(state: dict[str, Any], u: torch.Tensor, g: torch.Tensor, beta: float) -> None:
    """Update the row/column statistics from ``u`` and overwrite ``u`` with the update."""
    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
    row.mul_(beta).add_(u.mean(dim=-1), alpha=1 - beta)
    col.mul_(beta).add_(u.mean(dim=-2), alpha=1 - beta)
    row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
    col_factor = col.unsqueeze(-2).rsqrt()
    torch.mul(row_factor, col_factor, out=u)
    u.mul_(g)
