"""Adamax, NAdam and RAdam: torch's update rules (NAdam with cstorch's extra factor)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import AdamaxArgs, NAdamArgs, RAdamArgs

__all__ = ["Adamax", "NAdam", "RAdam"]


def _zeros(param: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(param, memory_format=torch.preserve_format)


class Adamax(PlugtrainOptimizer):
    """Adamax: ``u = max(b2 u, |g| + eps)``; ``p -= lr / (1 - b1^t) * m / u`` (L2 decay)."""

    schema = AdamaxArgs
    name = "Adamax"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, first moment and infinity norm at zero."""
        state["step"] = self.new_step()
        state["exp_avg"] = _zeros(param)
        state["exp_inf"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adamax step over ``params``."""
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_inf"] for s in states]]
        lists.append([s["step"] for s in states])
        for ops, (ps, gs, ms, us, steps), _ in self.runs(group, lists):
            ts = self.advance(ops, steps)
            gs = self.effective_grads(  # noqa: PLW2901 - the decayed gradient replaces it
                ops, ps, gs, weight_decay=wd, maximize=group["maximize"], slot=1
            )
            ops.lerp_(ms, gs, 1 - beta1)
            bound = self.scratch(ps, 0)
            ops.copy_(bound, gs)
            ops.abs_(bound)
            ops.add_scalar_(bound, eps)
            ops.mul_(us, beta2)
            ops.maximum_(us, bound)
            ops.addcdiv_(ps, ms, us, [-lr / (1 - beta1**t) for t in ts])


class NAdam(PlugtrainOptimizer):
    """NAdam as cstorch computes it.

    ``mu_t = b1 (1 - 0.5 * 0.96^(t psi))``, ``P_t = prod mu_i``; ``denom = sqrt(v / (1 - b2^t)) +
    eps``; ``p -= lr (1 - mu_t) / (1 - P_t) * g / denom + lr mu_{t+1} / (1 - P_t mu_t mu_{t+1}) *
    m / denom``: the momentum term has one more factor ``mu_t`` than torch's. The running
    product ``mu_product`` is kept as a Python float (never cast to the parameter dtype).
    """

    schema = NAdamArgs
    name = "NAdam"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, momentum product 1 and zero moments."""
        state["step"] = self.new_step()
        state["mu_product"] = 1.0
        state["exp_avg"] = _zeros(param)
        state["exp_avg_sq"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One NAdam step over ``params``."""
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd, psi = as_float(group["weight_decay"]), as_float(group["momentum_decay"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        lists.append([s["step"] for s in states])
        fused = self.can_fuse(group, params)
        for ops, (ps, gs, ms, vs, steps), idx in self.runs(group, lists):
            ts = self.advance(ops, steps)
            gs = self.effective_grads(ops, ps, gs, weight_decay=wd, slot=1)  # noqa: PLW2901
            grad_coef, mom_coef = [], []
            for i, t in zip(idx, ts, strict=True):
                mu = beta1 * (1 - 0.5 * 0.96 ** (t * psi))
                mu_next = beta1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
                product = states[i]["mu_product"] * mu
                states[i]["mu_product"] = product
                grad_coef.append(-lr * (1 - mu) / (1 - product))
                mom_coef.append(-lr * mu_next / (1 - product * mu * mu_next))
            # sqrt(v / (1 - b2^t)) + eps = (sqrt(v) + c eps) / c with c = sqrt(1 - b2^t): the
            # bias correction folds into eps and the coefficients (no pass over v for it).
            cs = [math.sqrt(1 - beta2**t) for t in ts]
            if fused:
                # Moments and the momentum term in one pass: Adam's update is
                # lr / (1 - b1^t) * m / (sqrt(v) / c + eps), NAdam's momentum term with
                # lr = -mom_coef (1 - b1^t). The gradient's L2 decay is already in ``gs``.
                keys = list(zip(ts, mom_coef, strict=True))
                for key, where in self.split_by(keys):
                    t, k = cast("tuple[float, float]", key)
                    p_, g_, m_, v_, s_ = self.take([ps, gs, ms, vs, steps], where)
                    torch._fused_adam_(
                        p_,
                        g_,
                        m_,
                        v_,
                        [],
                        s_,
                        amsgrad=False,
                        lr=-k * (1 - beta1**t),
                        beta1=beta1,
                        beta2=beta2,
                        weight_decay=0.0,
                        eps=eps,
                        maximize=False,
                    )
            else:
                ops.lerp_(ms, gs, 1 - beta1)
                ops.mul_(vs, beta2)
                ops.addcmul_(vs, gs, gs, 1 - beta2)
            denom = self.scratch(ps, 0)
            ops.sqrt_into(denom, vs)
            ops.add_scalar_(denom, [c * eps for c in cs])
            ops.addcdiv_(ps, gs, denom, [k * c for k, c in zip(grad_coef, cs, strict=True)])
            if not fused:
                ops.addcdiv_(ps, ms, denom, [k * c for k, c in zip(mom_coef, cs, strict=True)])


class RAdam(PlugtrainOptimizer):
    """Rectified Adam (torch's rule): the adaptive term only once its variance is tractable.

    With ``rho_t > 5``: ``p -= lr * r_t * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``;
    otherwise ``p -= lr / (1 - b1^t) * m``. L2 ``weight_decay``.
    """

    schema = RAdamArgs
    name = "RAdam"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero moments."""
        state["step"] = self.new_step()
        state["exp_avg"] = _zeros(param)
        state["exp_avg_sq"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One RAdam step over ``params``."""
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd = as_float(group["weight_decay"])
        rho_inf = 2 / (1 - beta2) - 1
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        lists.append([s["step"] for s in states])
        for ops, (ps, gs, ms, vs, steps), _ in self.runs(group, lists):
            ts = self.advance(ops, steps)
            gs = self.effective_grads(ops, ps, gs, weight_decay=wd, slot=1)  # noqa: PLW2901
            ops.lerp_(ms, gs, 1 - beta1)
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            rhos = [rho_inf - 2 * t * beta2**t / (1 - beta2**t) for t in ts]
            # Before rectification the step is momentum SGD with lr / (1 - b1^t).
            keys = [(True, 0.0) if rho > 5 else (False, t) for rho, t in zip(rhos, ts, strict=True)]
            for (rectified, t), where in self.split_by(keys):  # type: ignore[misc]
                p_, m_, v_, t_, rho_ = self.take([ps, ms, vs, ts, rhos], where)
                if not rectified:
                    ops.add_(p_, m_, alpha=-lr / (1 - beta1**t))
                    continue
                denom = self.scratch(p_, 0)
                ops.copy_(denom, v_)
                ops.sqrt_(denom)
                ops.add_scalar_(denom, eps)
                coef = [
                    -lr * _rectification(rho, rho_inf) * math.sqrt(1 - beta2**t) / (1 - beta1**t)
                    for t, rho in zip(t_, rho_, strict=True)
                ]
                ops.addcdiv_(p_, m_, denom, coef)


def _rectification(rho: float, rho_inf: float) -> float:
    return math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
