"""Muon: momentum orthogonalised by Newton-Schulz iterations; runs on any device, CPU included."""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import MuonArgs

__all__ = ["Muon", "newton_schulz"]

_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(
    matrices: torch.Tensor, steps: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Approximately orthogonalise each matrix of a ``(batch, rows, cols)`` stack.

    The quintic iteration of Keller Jordan's Muon, on matrices normalised to unit Frobenius
    norm; it works on the wide orientation (rows <= cols). The iterations run in ``dtype`` if
    given (e.g. ``torch.bfloat16``, after normalising in float32), otherwise in the input's
    precision with 16-bit inputs raised to float32. The result has the iterations' dtype.
    """
    a, b, c = _COEFFICIENTS
    x = matrices.float() if matrices.dtype in (torch.float16, torch.bfloat16) else matrices
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + 1e-7)
    if dtype is not None:
        x = x.to(dtype)
    for _ in range(steps):
        gram = x @ x.mT
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.baddbmm(x, poly, x, beta=a)
    return x.mT if tall else x


class Muon(PlugtrainOptimizer):
    """Muon (the Moonlight form, which cstorch follows), working on CPU.

    For a parameter with 2 or more dimensions (viewed as ``rows x rest``):
    ``buf = momentum buf + g``; ``u = g + momentum buf`` (Nesterov) or ``buf``;
    ``O = NewtonSchulz(u, ns_steps)``; ``p *= 1 - lr wd``;
    ``p -= lr * 0.2 * sqrt(max(rows, cols)) * O``. The multi-tensor path runs the iterations
    as one batched matrix product per shape. ``ns_dtype="bfloat16"`` runs them in bfloat16 (as
    torch.optim.Muon and pytorch-optimizer do): faster where bfloat16 matrix products are, with
    an orthogonalised update accurate to about 1e-2.

    0-D and 1-D parameters cannot be orthogonalised: with ``fallback="adamw"`` (default) they
    take cstorch's AdamW update with ``fallback_betas``, ``fallback_eps`` and the group's lr and
    weight decay; with ``fallback=None`` they are a ``ValueError`` at construction.
    """

    schema = MuonArgs
    name = "Muon"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """A zero momentum buffer, or AdamW state for a fallback parameter."""
        if param.dim() >= 2:
            state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            return
        if group["fallback"] is None:
            names = group.get("param_names")
            which = names[[id(p) for p in group["params"]].index(id(param))] if names else "a"
            message = (
                f"cannot orthogonalise {which} parameter of shape {tuple(param.shape)} "
                "(fewer than 2 dimensions); set fallback='adamw' or leave such parameters to "
                "another optimizer, got fallback=None"
            )
            raise ConfigError([ConfigIssue("Muon.fallback", message)])
        state["step"] = self.new_step()
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Muon step over ``params`` (fallback parameters included)."""
        matrices = [i for i, p in enumerate(params) if p.dim() >= 2]
        vectors = [i for i, p in enumerate(params) if p.dim() < 2]
        if matrices:
            ps, gs = self.take([params, grads], matrices)
            self._muon(group, ps, gs)
        if vectors:
            ps, gs = self.take([params, grads], vectors)
            self._adamw(group, ps, gs)

    def _muon(self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]):
        lr, wd = as_float(group["lr"]), as_float(group["weight_decay"])
        momentum, steps = as_float(group["momentum"]), int(group["ns_steps"])
        ns_dtype = torch.bfloat16 if group.get("ns_dtype") == "bfloat16" else None
        bufs = [self.state[p]["momentum_buffer"] for p in params]
        for ops, (ps, gs, bs), _ in self.runs(group, [params, grads, bufs]):
            ops.mul_(bs, momentum)
            ops.add_(bs, gs)
            if group["nesterov"]:
                directions = self.scratch(ps, 0)
                ops.copy_(directions, gs)
                ops.add_(directions, bs, alpha=momentum)
            else:
                directions = bs
            if wd != 0:
                ops.mul_(ps, 1 - lr * wd)
            for which, where in self.split_by([_matrix_shape(p) for p in ps]):
                rows, cols = which  # type: ignore[misc]
                p_, d_ = self.take([ps, directions], where)
                stack = torch.stack([d.reshape(rows, cols) for d in d_])
                ortho = newton_schulz(stack, steps, ns_dtype).to(p_[0].dtype)
                scale = -lr * 0.2 * math.sqrt(max(rows, cols))
                ops.add_(p_, [o.view_as(p) for o, p in zip(ortho, p_, strict=True)], alpha=scale)

    def _adamw(self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]):
        lr, wd, eps = (as_float(group[k]) for k in ("lr", "weight_decay", "fallback_eps"))
        beta1, beta2 = (as_float(b) for b in group["fallback_betas"])
        states = [self.state[p] for p in params]
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        lists.append([s["step"] for s in states])
        for ops, (ps, gs, ms, vs, steps), _ in self.runs(group, lists):
            ts = self.advance(ops, steps)
            ops.lerp_(ms, gs, 1 - beta1)
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            denom = self.scratch(ps, 0)
            ops.copy_(denom, vs)
            ops.sqrt_(denom)
            ops.add_scalar_(denom, eps)
            if wd != 0:
                ops.mul_(ps, 1 - lr * wd)
            coef = [-lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) for t in ts]
            ops.addcdiv_(ps, ms, denom, coef)


def _matrix_shape(param: torch.Tensor) -> tuple[int, int]:
    return param.shape[0], param.numel() // param.shape[0]
