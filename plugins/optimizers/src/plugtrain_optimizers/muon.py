"""Muon: momentum orthogonalised by Newton-Schulz iterations; runs on any device, CPU included."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import MuonArgs

__all__ = ["Muon", "newton_schulz"]

_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


@functools.cache
def native_bfloat16_matmul(device_type: str) -> bool:
    """Whether bfloat16 matrix products run natively (fast) on ``device_type``.

    On CUDA and MPS, yes. On the CPU, where oneDNN has bfloat16 kernels (AVX-512 or AMX);
    without them (AVX2 only) torch falls back to a reference loop many times slower than
    float32.
    """
    if device_type != "cpu":
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """Round float32 ``x`` to bfloat16 in place (the values a bfloat16 product would store)."""
    return x.copy_(x.to(torch.bfloat16))


def newton_schulz(
    matrices: torch.Tensor, steps: int, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Approximately orthogonalise each matrix of a ``(batch, rows, cols)`` stack.

    The quintic iteration of Keller Jordan's Muon, on matrices normalised (in float32 or
    better) to unit Frobenius norm; it works on the wide orientation (rows <= cols). The
    iterations run in ``dtype`` if given, otherwise in the input's precision with 16-bit inputs
    raised to float32; the result has the iterations' dtype.

    ``torch.bfloat16`` where the device multiplies bfloat16 natively
    (:func:`native_bfloat16_matmul`) runs bfloat16 products; elsewhere each product is a
    float32 product of bfloat16 values rounded to bfloat16, which is what a bfloat16 product
    computes (float32 accumulation, one rounding of the result), at float32 speed.
    """
    a, b, c = _COEFFICIENTS
    x = matrices.float() if matrices.dtype in (torch.float16, torch.bfloat16) else matrices
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + 1e-7)
    emulate = dtype == torch.bfloat16 and not native_bfloat16_matmul(x.device.type)
    if emulate:
        x = _bf16(x.float())
    elif dtype is not None:
        x = x.to(dtype)
    gram = x.new_empty(x.shape[:-1] + x.shape[-2:-1])
    poly = torch.empty_like(gram)
    other = torch.empty_like(x)
    for _ in range(steps):
        torch.bmm(x, x.mT, out=gram)
        if emulate:
            _bf16(gram)
        torch.baddbmm(gram, gram, gram, beta=b, alpha=c, out=poly)
        if emulate:
            _bf16(poly)
        torch.baddbmm(x, poly, x, beta=a, out=other)
        if emulate:
            _bf16(other)
        x, other = other, x
    if emulate:
        x = x.to(torch.bfloat16)
    return x.mT if tall else x


class Muon(PlugtrainOptimizer):
    """Muon (the Moonlight form, which cstorch follows), working on CPU.

    For a parameter with 2 or more dimensions (viewed as ``rows x rest``):
    ``buf = momentum buf + g``; ``u = g + momentum buf`` (Nesterov) or ``buf``;
    ``O = NewtonSchulz(u, ns_steps)``; ``p *= 1 - lr wd``;
    ``p -= lr * 0.2 * sqrt(max(rows, cols)) * O``. The multi-tensor path runs the iterations
    as one batched matrix product per shape. By default (``ns_dtype="bfloat16"``, as
    torch.optim.Muon and pytorch-optimizer) they run in bfloat16 (see :func:`newton_schulz`);
    the orthogonalised update is then accurate to about 1e-2. ``ns_dtype="float32"`` runs them
    in float32 (float64 parameters: float64).

    0-D and 1-D parameters cannot be orthogonalised: with ``fallback="adamw"`` (default) they
    take cstorch's AdamW update with ``fallback_betas``, ``fallback_eps`` and the group's lr and
    weight decay; with ``fallback=None`` they are a ``ValueError`` at construction.
    """

    elementwise = False  # whole-tensor norms or matrix shapes: refused under FSDP2

    schema = MuonArgs
    name = "Muon"
    tune_threads = False

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
        # an empty matrix has nothing to orthogonalise (and no row count to scale by)
        matrices = [i for i, p in enumerate(params) if p.dim() >= 2 and p.numel() > 0]
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
        ns_dtype = torch.bfloat16 if group.get("ns_dtype", "bfloat16") == "bfloat16" else None
        nesterov = bool(group["nesterov"])
        bufs = [self.state[p]["momentum_buffer"] for p in params]
        for ops, (_, gs, bs), _ in self.blocks(group, [params, grads, bufs]):
            ops.mul_(bs, momentum)
            ops.add_(bs, gs)
        if wd != 0:
            for ops, (ps,), _ in self.blocks(group, [params]):
                ops.mul_(ps, 1 - lr * wd)
        keys = [(_matrix_shape(p), p.device, p.dtype) for p in params]
        for which, where in self.split_by(keys):
            (rows, cols), _, _ = which  # type: ignore[misc]
            p_, g_, b_ = self.take([params, grads, bufs], where)
            # The directions go straight into the stack the iterations read (one pass).
            stack = self.work_buffer(len(p_) * rows * cols, p_[0].device, p_[0].dtype, 0)
            stack = stack.view(len(p_), rows, cols)
            for out, g, buf in zip(stack.unbind(0), g_, b_, strict=True):
                if nesterov:
                    torch.add(
                        g.reshape(rows, cols), buf.reshape(rows, cols), alpha=momentum, out=out
                    )
                else:
                    out.copy_(buf.reshape(rows, cols))
            ortho = newton_schulz(stack, steps, ns_dtype)
            scale = -lr * 0.2 * math.sqrt(max(rows, cols))
            for p, o in zip(p_, ortho.unbind(0), strict=True):
                p.add_(o.view(p.shape), alpha=scale)

    def _adamw(self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]):
        lr, wd, eps = (as_float(group[k]) for k in ("lr", "weight_decay", "fallback_eps"))
        beta1, beta2 = (as_float(b) for b in group["fallback_betas"])
        states = [self.state[p] for p in params]
        ts = self.step_all(group, [s["step"] for s in states])
        lists = [params, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]]
        coefs = [-lr * math.sqrt(1 - beta2**t) / (1 - beta1**t) for t in ts]
        for ops, (ps, gs, ms, vs), (coef,) in self.blocks(group, lists, [coefs]):
            ops.lerp_(ms, gs, 1 - beta1)
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            denom = self.block_scratch(ps, 0)
            ops.sqrt_into(denom, vs)
            ops.add_scalar_(denom, eps)
            if wd != 0:
                ops.mul_(ps, 1 - lr * wd)
            ops.addcdiv_(ps, ms, denom, coef)


def _matrix_shape(param: torch.Tensor) -> tuple[int, int]:
    return param.shape[0], param.numel() // param.shape[0]
