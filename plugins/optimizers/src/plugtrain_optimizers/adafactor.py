"""Adafactor with the numerics and restrictions of cstorch 2.10."""

from __future__ import annotations

import math
from typing import Any

import attrs
import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers._blocks import block_elements
from plugtrain_optimizers.schemas import AdafactorArgs

__all__ = ["Adafactor"]


class Adafactor(PlugtrainOptimizer):
    """Adafactor as cstorch supports it (no first moment, update clipping at 1, fixed lr).

    At step t: ``rho = lr * max(RMS(p), eps2)`` (``lr`` without ``scale_parameter``);
    ``b2t = 1 - t^decay_rate``; ``u = g^2 + eps1``. Tensors with 2 or more dimensions keep
    row and column averages of ``u`` (over the last two dimensions) and use
    ``rsqrt(row / mean(row)) (x) rsqrt(col) * g``; others keep a full average ``v`` and use
    ``rsqrt(v) * g``. Then ``update /= max(RMS(update), 1)``; ``p -= wd * rho * p``;
    ``p -= rho * update``.
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
        """One Adafactor step over ``params``.

        Factored tensors of one shape are stacked a cache block at a time (or, when larger than
        a block, walked in row blocks: one pass for the statistics, one for the update's RMS,
        one for the update), so the update is never stored parameter-sized.
        """
        lr, wd = as_float(group["lr"]), as_float(group["weight_decay"])
        eps1, eps2 = (as_float(e) for e in group["eps"])
        decay, clip = as_float(group["decay_rate"]), as_float(group["clip_threshold"])
        states = [self.state[p] for p in params]
        ts = self.step_all(group, [s["step"] for s in states])
        betas = [1 - t**decay for t in ts]
        roots = [math.sqrt(p.numel()) for p in params]
        rhos = [lr] * len(params)
        if group["scale_parameter"]:
            norms = [0.0] * len(params)
            for ops, (ps,), idx in self.runs(group, [params]):
                for i, n in zip(idx, ops.norms(ps), strict=True):
                    norms[i] = n
            rhos = [lr * max(n / r, eps2) for n, r in zip(norms, roots, strict=True)]
        hyper = _Hyper(wd=wd, eps1=eps1, clip=clip)
        vectors = [i for i, p in enumerate(params) if p.dim() < 2]
        if vectors:
            lists = self.take([params, grads, [s.get("exp_avg_sq") for s in states]], vectors)
            scalars = self.take([betas, rhos, roots], vectors)
            self._vectors(group, lists, scalars, hyper)  # type: ignore[arg-type]
        limit = max(1, block_elements())
        pieces: dict[Any, list[int]] = {}
        for i, p in enumerate(params):
            if p.dim() >= 2:
                key = (p.shape, p.device, p.dtype, betas[i]) if self.use_foreach(group) else i
                pieces.setdefault(key, []).append(i)
        for where in pieces.values():
            per = max(1, limit // params[where[0]].numel())
            for start in range(0, len(where), per):
                chunk = where[start : start + per]
                self._factored(
                    [params[i] for i in chunk],
                    [grads[i] for i in chunk],
                    [states[i] for i in chunk],
                    betas[chunk[0]],
                    [rhos[i] for i in chunk],
                    [roots[i] for i in chunk],
                    hyper,
                )

    def _vectors(
        self,
        group: dict[str, Any],
        lists: list[list[torch.Tensor]],
        scalars: list[list[float]],
        hyper: _Hyper,
    ) -> None:
        """The unfactored update of 0-D/1-D tensors (whole tensors: their RMS comes first)."""
        for ops, (ps, gs, vs), idx in self.runs(group, lists):
            b_, rho_, root_ = ([s[i] for i in idx] for s in scalars)
            update = self.block_scratch(ps, 0)
            ops.mul_into(update, gs, gs)
            ops.add_scalar_(update, hyper.eps1)
            ops.mul_(vs, b_)
            ops.mul_(update, [1 - b for b in b_])
            ops.add_(vs, update)
            ops.copy_(update, vs)
            ops.rsqrt_(update)
            ops.mul_t_(update, gs)
            update_rms = [n / r for n, r in zip(ops.norms(update), root_, strict=True)]
            if hyper.wd != 0:
                ops.mul_(ps, [1 - hyper.wd * rho for rho in rho_])
            scales = [
                -rho / max(u / hyper.clip, 1.0) for rho, u in zip(rho_, update_rms, strict=True)
            ]
            ops.mul_(update, scales)
            ops.add_(ps, update)

    def _factored(
        self,
        ps: list[torch.Tensor],
        gs: list[torch.Tensor],
        states: list[dict[str, Any]],
        beta: float,
        rhos: list[float],
        roots: list[float],
        hyper: _Hyper,
    ) -> None:
        """The factored update of ``k`` same-shaped tensors, as one ``(k * M, R, C)`` batch."""
        shape, k = ps[0].shape, len(ps)
        rows_n, cols_n = shape[-2], shape[-1]
        batch = k * (ps[0].numel() // (rows_n * cols_n))
        dense = all(t.is_contiguous() for t in (*ps, *gs))
        if k == 1:
            g = gs[0].reshape(batch, rows_n, cols_n)
        else:
            g = self._work((batch, rows_n, cols_n), gs[0], 2)
            torch.cat([x.reshape(-1, rows_n, cols_n) for x in gs], out=g)
        step = rows_n if not dense else max(1, block_elements() // (batch * cols_n))
        spans = [(r, min(r + step, rows_n)) for r in range(0, rows_n, step)]
        row_factor, col_factor = self._factors(g, spans, states, beta, hyper.eps1, k)

        def update(r0: int, r1: int) -> torch.Tensor:
            out = self._work((batch, r1 - r0, cols_n), g, 1)
            torch.mul(row_factor[:, r0:r1], col_factor, out=out)
            return out.mul_(g[:, r0:r1])

        # Pass 2: the RMS of each tensor's update.
        squares = torch.zeros(k, dtype=torch.float64)
        for r0, r1 in spans:
            norms = torch.linalg.vector_norm(
                update(r0, r1).view(k, -1), dim=-1, dtype=_norm_dtype(g)
            )
            squares += norms.double().square().cpu()
        update_rms = [math.sqrt(sq) / r for sq, r in zip(squares.tolist(), roots, strict=True)]
        scales = [-rho / max(u / hyper.clip, 1.0) for rho, u in zip(rhos, update_rms, strict=True)]
        # Pass 3: the decay and the update.
        if hyper.wd != 0:
            torch._foreach_mul_(ps, [1 - hyper.wd * rho for rho in rhos])
        if len(spans) == 1:
            out = update(0, rows_n).view(k, -1)
            if k == 1:
                ps[0].add_(out.view(shape), alpha=scales[0])
            else:
                out.mul_(torch.tensor(scales, dtype=out.dtype, device=out.device).unsqueeze(-1))
                torch._foreach_add_(ps, [x.view(shape) for x in out.unbind(0)])
            return
        target = ps[0].view(batch, rows_n, cols_n)
        for r0, r1 in spans:
            target[:, r0:r1].add_(update(r0, r1), alpha=scales[0])

    def _factors(
        self,
        g: torch.Tensor,
        spans: list[tuple[int, int]],
        states: list[dict[str, Any]],
        beta: float,
        eps1: float,
        k: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pass 1: update the row/column statistics from ``u = g^2 + eps1``; their factors."""
        batch, rows_n, cols_n = g.shape
        row_state = [s["exp_avg_sq_row"] for s in states]
        col_state = [s["exp_avg_sq_col"] for s in states]
        row = torch.cat([r.reshape(-1, rows_n) for r in row_state])
        col = torch.cat([c.reshape(-1, cols_n) for c in col_state])
        # Pass 1: row and column means of u = g^2 + eps1.
        row_mean = torch.empty_like(row)
        col_mean = None
        for r0, r1 in spans:
            u = self._work((batch, r1 - r0, cols_n), g, 0)
            torch.mul(g[:, r0:r1], g[:, r0:r1], out=u)
            u.add_(eps1)
            row_mean[:, r0:r1] = u.mean(dim=-1)
            part = u.mean(dim=-2) if len(spans) == 1 else u.sum(dim=-2)
            col_mean = part if col_mean is None else col_mean.add_(part)
        assert col_mean is not None
        if len(spans) > 1:
            col_mean.div_(rows_n)
        row.mul_(beta).add_(row_mean, alpha=1 - beta)
        col.mul_(beta).add_(col_mean, alpha=1 - beta)
        torch._foreach_copy_(
            row_state, [x.view_as(r) for x, r in zip(row.chunk(k), row_state, strict=True)]
        )
        torch._foreach_copy_(
            col_state, [x.view_as(c) for x, c in zip(col.chunk(k), col_state, strict=True)]
        )
        row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        col_factor = col.unsqueeze(-2).rsqrt()

        return row_factor, col_factor

    def _work(self, shape: tuple[int, ...], like: torch.Tensor, slot: int) -> torch.Tensor:
        """A cache-resident work buffer of ``shape`` (block scratch ``slot``)."""
        return self.work_buffer(math.prod(shape), like.device, like.dtype, slot).view(shape)


@attrs.frozen
class _Hyper:
    wd: float
    eps1: float
    clip: float


def _norm_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32
