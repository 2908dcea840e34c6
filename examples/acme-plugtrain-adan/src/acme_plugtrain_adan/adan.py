"""Adan, the adaptive Nesterov momentum optimizer.

Xie, Zhou, Li, Lin and Yan, "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing
Deep Models" (2022, arXiv:2208.06677), Algorithm 1, in the bias-corrected form of the authors'
reference implementation. With ``betas = (b1, b2, b3)`` (the paper writes ``1 - b``), gradient
``g_k`` and ``g_0 := g_1``::

    m_k = b1 * m_{k-1} + (1 - b1) * g_k                                  gradient average
    v_k = b2 * v_{k-1} + (1 - b2) * (g_k - g_{k-1})                      gradient-difference average
    n_k = b3 * n_{k-1} + (1 - b3) * (g_k + b2 * (g_k - g_{k-1}))**2      squared Nesterov gradient
    u_k = (m_k / (1 - b1**k) + b2 * v_k / (1 - b2**k)) / (sqrt(n_k / (1 - b3**k)) + eps)
    p_{k+1} = (p_k - lr * u_k) / (1 + lr * weight_decay)                 proximal decay (default)
    p_{k+1} = (1 - lr * weight_decay) * p_k - lr * u_k                   with no_prox=True

All state exists from construction, so ``state_dict()`` is complete before the first step. The
multi-tensor (foreach) path and the per-tensor path run the same operations in the same order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from acme_plugtrain_adan.schemas import AdanArgs
from plugtrain.schema import bind_arguments, constructor_signature, validated_arguments

__all__ = ["Adan"]


@dataclasses.dataclass(frozen=True)
class _Hyper:
    """One param group's hyperparameters as Python floats, for one step."""

    lr: float
    beta1: float
    beta2: float
    beta3: float
    eps: float
    weight_decay: float
    no_prox: bool

    @classmethod
    def of(cls, group: dict[str, Any]) -> _Hyper:
        beta1, beta2, beta3 = (float(b) for b in group["betas"])
        return cls(
            lr=float(group["lr"]),
            beta1=beta1,
            beta2=beta2,
            beta3=beta3,
            eps=float(group["eps"]),
            weight_decay=float(group["weight_decay"]),
            no_prox=bool(group["no_prox"]),
        )


@dataclasses.dataclass(frozen=True)
class _Scalars:
    """Per-parameter step multipliers derived from the parameter's step count ``k``."""

    first: bool
    """Whether this is the parameter's first step (``g_{k-1}`` is then taken to be ``g_k``)."""
    bias_sqrt3: float
    """``sqrt(1 - beta3**k)``."""
    step_m: float
    """``-lr / (1 - beta1**k)``, the multiplier of ``m / denominator``."""
    step_v: float
    """``-lr * beta2 / (1 - beta2**k)``, the multiplier of ``v / denominator``."""

    @classmethod
    def of(cls, hyper: _Hyper, k: int) -> _Scalars:
        return cls(
            first=k == 1,
            bias_sqrt3=math.sqrt(1.0 - hyper.beta3**k),
            step_m=-hyper.lr / (1.0 - hyper.beta1**k),
            step_v=-hyper.lr * hyper.beta2 / (1.0 - hyper.beta2**k),
        )


class Adan(torch.optim.Optimizer):
    """Adan (Xie et al., 2022): Adam-style steps along a Nesterov-extrapolated gradient.

    :param params: tensors, ``(name, tensor)`` pairs or param-group dicts to optimize (real
        floating point; tested with float32 and float64).
    :param lr: learning rate.
    :param betas: decay rates ``(b1, b2, b3)`` of the gradient average, the average of the
        difference of successive gradients, and the squared-gradient average.
    :param eps: added to the denominator for numerical stability.
    :param weight_decay: decoupled weight decay, proximal unless ``no_prox``.
    :param no_prox: decay as ``p <- (1 - lr * weight_decay) * p`` before the update instead of
        dividing by ``1 + lr * weight_decay`` after it.
    :param foreach: use the multi-tensor path; ``None`` uses it when every parameter is on CUDA,
        as torch's own optimizers do.
    :param aliases: other names of the arguments above (``learning_rate`` for ``lr``).
    :raises plugtrain.ConfigError: naming every bad argument.
    """

    # The signature is derived from the schema, so the two cannot disagree:
    # Adan(params, lr=0.001, betas=(0.98, 0.92, 0.99), eps=1e-08, weight_decay=0.0,
    #      no_prox=False, foreach=None, **aliases)
    __signature__ = constructor_signature(AdanArgs, ("params",))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        given = bind_arguments(self.__signature__, args, kwargs)
        if "params" not in given:
            message = "Adan needs the parameters to optimize as its first argument"
            raise TypeError(message)
        params = given.pop("params")
        defaults = validated_arguments(AdanArgs, given, owner="Adan")
        defaults["lr"] = float(defaults["lr"])
        defaults["betas"] = tuple(float(b) for b in defaults["betas"])
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a param group and create the state of its parameters right away."""
        super().add_param_group(param_group)
        for p in self.param_groups[-1]["params"]:
            self._init_state(p)

    def _init_state(self, param: torch.Tensor) -> None:
        state = self.state[param]
        if state:
            return
        if not (param.is_floating_point() and not param.is_complex()):
            message = f"Adan optimizes real floating-point tensors, got {param.dtype}"
            raise TypeError(message)
        # Like torch's Adam, the step count is a CPU float tensor: it survives state_dict() and
        # load_state_dict() unchanged, and reading it never waits for an accelerator.
        state["step"] = torch.tensor(0.0, dtype=torch.float32)
        for key in ("exp_avg", "exp_avg_diff", "exp_avg_sq", "neg_pre_grad"):
            state[key] = torch.zeros_like(param, memory_format=torch.preserve_format)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one optimization step; ``closure`` re-evaluates the loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads: list[torch.Tensor] = [p.grad for p in params]  # type: ignore[misc]
            if any(g.is_sparse for g in grads):
                message = "Adan does not support sparse gradients"
                raise RuntimeError(message)
            hyper = _Hyper.of(group)
            states = []
            for p in params:
                state = self.state[p]
                if not state:  # a parameter added to a group by hand
                    self._init_state(p)
                state["step"] += 1
                states.append(state)
            scalars = [_Scalars.of(hyper, int(s["step"].item())) for s in states]
            if self._use_foreach(group, params):
                _adan_foreach(params, grads, states, scalars, hyper)
            else:
                _adan_single(params, grads, states, scalars, hyper)
        return loss

    @staticmethod
    def _use_foreach(group: dict[str, Any], params: list[torch.Tensor]) -> bool:
        foreach = group.get("foreach")
        if foreach is None:
            return not torch.jit.is_scripting() and all(p.is_cuda for p in params)
        return bool(foreach)


def _adan_single(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states: list[dict[str, Any]],
    scalars: list[_Scalars],
    hyper: _Hyper,
) -> None:
    """One Adan step, one tensor at a time."""
    b1, b2, b3 = hyper.beta1, hyper.beta2, hyper.beta3
    for p, g, state, s in zip(params, grads, states, scalars, strict=True):
        m, v = state["exp_avg"], state["exp_avg_diff"]
        n, neg = state["exp_avg_sq"], state["neg_pre_grad"]
        if s.first:
            neg.zero_().sub_(g)
        neg.add_(g)  # g_k - g_{k-1}
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).add_(neg, alpha=1 - b2)
        neg.mul_(b2).add_(g)  # g_k + b2 * (g_k - g_{k-1})
        n.mul_(b3).addcmul_(neg, neg, value=1 - b3)
        denom = n.sqrt().div_(s.bias_sqrt3).add_(hyper.eps)
        if hyper.no_prox and hyper.weight_decay != 0:
            p.mul_(1 - hyper.lr * hyper.weight_decay)
        p.addcdiv_(m, denom, value=s.step_m)
        p.addcdiv_(v, denom, value=s.step_v)
        if not hyper.no_prox and hyper.weight_decay != 0:
            p.div_(1 + hyper.lr * hyper.weight_decay)
        neg.zero_().sub_(g)  # -g_k, the next step's -g_{k-1}


def _adan_foreach(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states: list[dict[str, Any]],
    scalars: list[_Scalars],
    hyper: _Hyper,
) -> None:
    """One Adan step with multi-tensor kernels, per run of tensors sharing device and dtype."""
    b1, b2, b3 = hyper.beta1, hyper.beta2, hyper.beta3
    for indices in _runs(params, grads):
        ps = [params[i] for i in indices]
        gs = [grads[i] for i in indices]
        ms = [states[i]["exp_avg"] for i in indices]
        vs = [states[i]["exp_avg_diff"] for i in indices]
        ns = [states[i]["exp_avg_sq"] for i in indices]
        negs = [states[i]["neg_pre_grad"] for i in indices]
        ss = [scalars[i] for i in indices]
        for neg, g, s in zip(negs, gs, ss, strict=True):
            if s.first:
                neg.zero_().sub_(g)
        torch._foreach_add_(negs, gs)
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, gs, alpha=1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_add_(vs, negs, alpha=1 - b2)
        torch._foreach_mul_(negs, b2)
        torch._foreach_add_(negs, gs)
        torch._foreach_mul_(ns, b3)
        torch._foreach_addcmul_(ns, negs, negs, value=1 - b3)
        denoms = torch._foreach_sqrt(ns)
        torch._foreach_div_(denoms, [s.bias_sqrt3 for s in ss])
        torch._foreach_add_(denoms, hyper.eps)
        if hyper.no_prox and hyper.weight_decay != 0:
            torch._foreach_mul_(ps, 1 - hyper.lr * hyper.weight_decay)
        torch._foreach_addcdiv_(ps, ms, denoms, [s.step_m for s in ss])
        torch._foreach_addcdiv_(ps, vs, denoms, [s.step_v for s in ss])
        if not hyper.no_prox and hyper.weight_decay != 0:
            torch._foreach_div_(ps, 1 + hyper.lr * hyper.weight_decay)
        torch._foreach_zero_(negs)
        torch._foreach_sub_(negs, gs)


def _runs(params: list[torch.Tensor], grads: list[torch.Tensor]) -> list[list[int]]:
    """Indices of ``params`` grouped by (device, dtype) of parameter and gradient."""
    runs: dict[tuple[Any, ...], list[int]] = {}
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        runs.setdefault((p.device, p.dtype, g.device, g.dtype), []).append(i)
    return list(runs.values())
