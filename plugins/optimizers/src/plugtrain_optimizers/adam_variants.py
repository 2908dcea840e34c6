"""Adamax, NAdam and RAdam: torch's update rules (NAdam with cstorch's extra factor)."""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers._ops import FOREACH, PER_TENSOR
from plugtrain_optimizers.schemas import AdamaxArgs, NAdamArgs, RAdamArgs

__all__ = ["Adamax", "NAdam", "RAdam"]


def _zeros(param: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(param, memory_format=torch.preserve_format)


class Adamax(PlugtrainOptimizer):
    """Adamax: ``u = max(b2 u, |g| + eps)``; ``p -= lr / (1 - b1^t) * m / u`` (L2 decay)."""

    kernels_match_torch_path = True

    schema = AdamaxArgs
    name = "Adamax"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter, first moment and infinity norm at zero."""
        state["step"] = self.new_step()
        state["exp_avg"] = _zeros(param)
        state["exp_inf"] = _zeros(param)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Adamax step over ``params`` (cache blocks)."""
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd = as_float(group["weight_decay"])
        states = [self.state[p] for p in params]
        ts = self.step_all(group, [s["step"] for s in states])
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_inf"] for s in states]]
        sizes = [-lr / (1 - beta1**t) for t in ts]
        flip = -1.0 if group["maximize"] else 1.0
        scalars = [sizes, 1 - beta1, beta2, eps, wd, flip]
        if self.run_native(group, "adamax_step", lists, scalars):
            return
        for ops, (ps, gs, ms, us), (size,) in self.blocks(group, lists, [sizes]):
            gs = self.effective_grads(  # noqa: PLW2901 - the decayed gradient replaces it
                ops, ps, gs, weight_decay=wd, maximize=group["maximize"], slot=1
            )
            ops.lerp_(ms, gs, 1 - beta1)
            bound = self.block_scratch(ps, 0)
            ops.abs_into(bound, gs)
            ops.add_scalar_(bound, eps)
            ops.mul_(us, beta2)
            ops.maximum_(us, bound)
            ops.addcdiv_(ps, ms, us, size)


class NAdam(PlugtrainOptimizer):
    """NAdam as cstorch computes it.

    ``mu_t = b1 (1 - 0.5 * 0.96^(t psi))``, ``P_t = prod mu_i``; ``denom = sqrt(v / (1 - b2^t)) +
    eps``; ``p -= lr (1 - mu_t) / (1 - P_t) * g / denom + lr mu_{t+1} / (1 - P_t mu_t mu_{t+1}) *
    m / denom``: the momentum term has one more factor ``mu_t`` than torch's. The running
    product ``mu_product`` is kept as a Python float (never cast to the parameter dtype).
    """

    schema = NAdamArgs
    name = "NAdam"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

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
        steps = [s["step"] for s in states]
        ts = self.step_all(group, steps)
        grad_coef, mom_coef = [], []
        for state, t in zip(states, ts, strict=True):
            mu = beta1 * (1 - 0.5 * 0.96 ** (t * psi))
            mu_next = beta1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
            product = state["mu_product"] * mu
            state["mu_product"] = product
            grad_coef.append(-lr * (1 - mu) / (1 - product))
            mom_coef.append(-lr * mu_next / (1 - product * mu * mu_next))
        # sqrt(v / (1 - b2^t)) + eps = (sqrt(v) + c eps) / c with c = sqrt(1 - b2^t): the bias
        # correction folds into eps and the coefficients (no pass over v for it).
        cs = [math.sqrt(1 - beta2**t) for t in ts]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        native = [
            1 - beta1,
            beta2,
            1 - beta2,
            [c * eps for c in cs],
            [k * c for k, c in zip(grad_coef, cs, strict=True)],
            [k * c for k, c in zip(mom_coef, cs, strict=True)],
            wd,
        ]
        if self.run_native(group, "nadam_step", lists, native):
            return
        fused = self.can_fuse(group, params)
        if wd != 0:
            # The L2-decayed gradient, taken before the update moves p (parameter-sized scratch).
            decayed = self.scratch(params, 1)
            ops = FOREACH if self.use_foreach(group) else PER_TENSOR
            ops.copy_(decayed, grads)
            ops.add_(decayed, params, alpha=wd)
            lists[1] = decayed
        if fused:
            # Moments and the momentum term in one pass: Adam's update is
            # lr / (1 - b1^t) * m / (sqrt(v) / c + eps), NAdam's momentum term with
            # lr = -mom_coef (1 - b1^t). The gradient's L2 decay is already in ``gs``.
            for run, _, indices in self.fused_runs(group, [*lists, steps], ts):
                keys = [(ts[i], mom_coef[i]) for i in indices]
                if len(run[0]) == 1 and len(indices) > 1:  # a flat group: one (t, k) for all
                    keys = keys[:1]
                for key, where in self.split_by(keys):
                    t, k = cast("tuple[float, float]", key)
                    p_, g_, m_, v_, s_ = self.take(run, where)
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
        scalars = [[c * eps for c in cs], [k * c for k, c in zip(grad_coef, cs, strict=True)]]
        scalars.append([k * c for k, c in zip(mom_coef, cs, strict=True)])
        for ops, (ps, gs, ms, vs), (ceps, gk, mk) in self.blocks(group, lists, scalars):
            if not fused:
                ops.lerp_(ms, gs, 1 - beta1)
                ops.mul_(vs, beta2)
                ops.addcmul_(vs, gs, gs, 1 - beta2)
            denom = self.block_scratch(ps, 0)
            ops.sqrt_into(denom, vs)
            ops.add_scalar_(denom, ceps)
            ops.addcdiv_(ps, gs, denom, gk)
            if not fused:
                ops.addcdiv_(ps, ms, denom, mk)


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
        """One RAdam step over ``params``.

        Once rectified, the step is cstorch's Adam step with lr scaled by ``r_t``:
        ``lr r_t sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``, which torch's fused Adam
        kernel computes (to rounding) with ``eps / sqrt(1 - b2^t)`` as its eps; before that, the
        kernel updates the moments (lr 0) and ``p -= lr / (1 - b1^t) * m`` follows.
        """
        lr, eps = as_float(group["lr"]), as_float(group["eps"])
        beta1, beta2 = (as_float(b) for b in group["betas"])
        wd = as_float(group["weight_decay"])
        rho_inf = 2 / (1 - beta2) - 1
        states = [self.state[p] for p in params]
        steps = [s["step"] for s in states]
        ts = self.step_all(group, steps)
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        rhos = [rho_inf - 2 * t * beta2**t / (1 - beta2**t) for t in ts]
        if self.can_fuse(group, params):
            for run, values, _ in self.fused_runs(group, [*lists, steps], ts):
                for t, where in self.split_by(values):
                    t = float(t)  # type: ignore[arg-type]  # noqa: PLW2901
                    p_, g_, m_, v_, s_ = self.take(run, where)
                    rho = rho_inf - 2 * t * beta2**t / (1 - beta2**t)
                    rectified = rho > 5
                    torch._fused_adam_(
                        p_,
                        g_,
                        m_,
                        v_,
                        [],
                        s_,
                        amsgrad=False,
                        lr=lr * _rectification(rho, rho_inf) if rectified else 0.0,
                        beta1=beta1,
                        beta2=beta2,
                        weight_decay=wd,
                        eps=eps / math.sqrt(1 - beta2**t),
                        maximize=False,
                    )
                    if not rectified:
                        torch._foreach_add_(p_, m_, alpha=-lr / (1 - beta1**t))
            return
        coefs = [
            -lr * _rectification(rho, rho_inf) * math.sqrt(1 - beta2**t) / (1 - beta1**t)
            if rho > 5
            else -lr / (1 - beta1**t)
            for t, rho in zip(ts, rhos, strict=True)
        ]
        rectified = [1.0 if rho > 5 else 0.0 for rho in rhos]
        for ops, (ps, gs, ms, vs), (coef, flags) in self.blocks(group, lists, [coefs, rectified]):
            gs = self.effective_grads(ops, ps, gs, weight_decay=wd, slot=1)  # noqa: PLW2901
            ops.lerp_(ms, gs, 1 - beta1)
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            for flag, where in self.split_by(flags):
                p_, m_, v_, c_ = self.take([ps, ms, vs, coef], where)
                if not flag:
                    # Before rectification the step is momentum SGD with lr / (1 - b1^t).
                    for c, at in self.split_by(c_):
                        p__, m__ = self.take([p_, m_], at)
                        ops.add_(p__, m__, alpha=float(c))  # type: ignore[arg-type]
                    continue
                denom = self.block_scratch(p_, 0)
                ops.sqrt_into(denom, v_)
                ops.add_scalar_(denom, eps)
                ops.addcdiv_(p_, m_, denom, c_)


def _rectification(rho: float, rho_inf: float) -> float:
    return math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
