"""Adafactor with the numerics and restrictions of cstorch 2.10."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import attrs
import torch

from plugtrain_optimizers import _native
from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers._blocks import block_elements, consecutive
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

    elementwise = False  # whole-tensor norms or matrix shapes: refused under FSDP2

    schema = AdafactorArgs
    name = "Adafactor"
    flat_by_default = True  # many small matrices: one step-counter kernel, matrices back to back
    native_kernels = True

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
        if any(p.numel() == 0 for p in params):  # nothing to update, and RMS would divide by 0
            params, grads = self.take(
                [params, grads], [i for i, p in enumerate(params) if p.numel()]
            )
            if not params:
                return
        lr, wd = as_float(group["lr"]), as_float(group["weight_decay"])
        eps1, eps2 = (as_float(e) for e in group["eps"])
        decay, clip = as_float(group["decay_rate"]), as_float(group["clip_threshold"])
        states = [self.state[p] for p in params]
        ts = self.step_all(group, [s["step"] for s in states])
        betas = [1 - t**decay for t in ts]
        hyper = _Hyper(wd=wd, eps1=eps1, clip=clip)
        native = self._native(group, params, grads, states, betas, hyper, lr, eps2)
        if native:
            stepped = set(native)
            rest = [i for i in range(len(params)) if i not in stepped]
            params, grads, states, betas = self.take([params, grads, states, betas], rest)
            if not params:
                return
        roots = [math.sqrt(p.numel()) for p in params]
        rhos = [lr] * len(params)
        if group["scale_parameter"]:
            norms = [0.0] * len(params)
            for ops, (ps,), idx in self.runs(group, [params]):
                for i, n in zip(idx, ops.norms(ps), strict=True):
                    norms[i] = n
            rhos = [lr * max(n / r, eps2) for n, r in zip(norms, roots, strict=True)]
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

    def _native(
        self,
        group: dict[str, Any],
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, Any]],
        betas: list[float],
        hyper: _Hyper,
        lr: float,
        eps2: float,
    ) -> list[int]:
        """The 2-D float32 CPU matrices, stepped by the native kernels; their indices.

        A matrix of at least :data:`~plugtrain_optimizers._native.PARALLEL_ELEMENTS` elements
        takes three passes, each split by rows between the threads (the statistics and the
        norm of ``p``; the update's norm; the update), the factors being made in between; the
        smaller ones of one shape take one call, which gives each thread whole matrices.
        """
        kernels = _native.load() if self.use_foreach(group) else None
        if kernels is None:
            return []
        scale_parameter = float(bool(group["scale_parameter"]))
        plan = self._native_plan(group, params, grads, states, betas)
        for i in plan.large:
            state, beta = states[i], betas[i]
            _rows_in_parallel(
                kernels,
                params[i],
                grads[i],
                state["exp_avg_sq_row"],
                state["exp_avg_sq_col"],
                [beta, 1 - beta, hyper.eps1, eps2, lr, hyper.wd, hyper.clip],
                bool(scale_parameter),
            )
        threads = kernels.threads(_native.PARALLEL_ELEMENTS)
        for (rows_n, cols_n, _), (first, count, arrays) in plan.small.items():
            work = self.work_buffer(
                2 * (rows_n + cols_n) * threads, params[0].device, torch.float64, 16
            )
            beta = betas[first]
            scalars = [beta, 1 - beta, hyper.eps1, eps2, lr, hyper.wd, hyper.clip]
            share = kernels.threads(count * rows_n * cols_n)
            _native.call(
                "adafactor_matrices",
                count, rows_n, cols_n, share, *arrays, work.data_ptr(), *scalars, scale_parameter,
            )  # fmt: skip
        if plan.done:
            torch.autograd.graph.increment_version([params[i] for i in plan.done])
        return plan.done

    def _native_plan(
        self,
        group: dict[str, Any],
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, Any]],
        betas: list[float],
    ) -> _NativePlan:
        """Which matrices the kernels step, and how; the last step's plan if nothing changed.

        Checking hundreds of small matrices costs more than stepping them, so the plan is kept
        while the same parameter, gradient and statistics tensors come back with the same
        data pointers (a tensor given new data, or a new gradient, makes a new plan).
        """
        threads = torch.get_num_threads()
        identity = (threads, *map(id, params), *map(id, grads))
        uniform = min(betas) == max(betas)  # one step count: one matrix group per shape
        cached = self._native_plans.get(id(group))
        if (
            cached is not None
            and uniform
            and cached.identity == identity
            and cached.pointers == _plan_pointers(params, grads, states, cached.done)
        ):
            return cached
        done: list[int] = []
        large: list[int] = []
        small_indices: dict[tuple[int, int, float], list[int]] = {}
        for i, p in enumerate(params):
            if p.dim() != 2:
                continue
            state = states[i]
            row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
            if not _native.usable_matrix(p, grads[i], row, col):
                continue
            if threads > 1 and p.numel() >= _native.PARALLEL_ELEMENTS:
                large.append(i)
            else:
                small_indices.setdefault((*p.shape, 0.0 if uniform else betas[i]), []).append(i)
            done.append(i)
        small = {}
        for key, where in small_indices.items():
            arrays = tuple(
                _pointers([tensors[i] for i in where])
                for tensors in (
                    params,
                    grads,
                    [s.get("exp_avg_sq_row") for s in states],
                    [s.get("exp_avg_sq_col") for s in states],
                )
            )
            small[key] = (where[0], len(where), arrays)
        pointers = _plan_pointers(params, grads, states, done)
        plan = _NativePlan(identity, pointers, done, large, small)
        if uniform:
            self._native_plans[id(group)] = plan
        return plan

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
        together = consecutive(gs) if k > 1 else None  # a flat group: a view, no copy
        if k == 1:
            g = gs[0].reshape(batch, rows_n, cols_n)
        elif together is not None:
            g = together.view(batch, rows_n, cols_n)
        else:
            g = self._work((batch, rows_n, cols_n), gs[0], 2)
            if len(shape) == 2:
                torch.stack(gs, out=g)
            else:
                torch.cat([x.reshape(-1, rows_n, cols_n) for x in gs], out=g)
        step = rows_n if not dense else max(1, block_elements() // (batch * cols_n))
        spans = [(r, min(r + step, rows_n)) for r in range(0, rows_n, step)]
        row_factor, col_factor, squares = self._factors(g, spans, states, beta, hyper.eps1, k)
        # Pass 2 (several row blocks only; one block keeps g^2 from pass 1): the update's RMS,
        # sum_r rf_r^2 sum_c cf_c^2 g_rc^2, as a matrix-vector product per row block.
        col_sq = col_factor.to(_acc_dtype(g)).square().mT  # (batch, C, 1)
        row_sq = row_factor.to(_acc_dtype(g)).square()  # (batch, R, 1)
        if squares is None:
            total = torch.zeros(batch, dtype=col_sq.dtype, device=g.device)
            for r0, r1 in spans:
                u = self._work((batch, r1 - r0, cols_n), g, 0, _acc_dtype(g))
                torch.mul(g[:, r0:r1], g[:, r0:r1], out=u)
                total += (torch.bmm(u, col_sq) * row_sq[:, r0:r1]).sum(dim=(-2, -1))
            squares = total
        per_tensor = squares.view(k, -1).sum(-1).tolist()
        update_rms = [math.sqrt(sq) / r for sq, r in zip(per_tensor, roots, strict=True)]
        scales = [-rho / max(u / hyper.clip, 1.0) for rho, u in zip(rhos, update_rms, strict=True)]
        # Pass 3: the decay, then p += (scale * rf) (x) cf * g.
        if hyper.wd != 0:
            torch._foreach_mul_(ps, [1 - hyper.wd * rho for rho in rhos])
        scale = torch.tensor(scales, dtype=row_factor.dtype, device=g.device)
        scaled_rows = (row_factor.view(k, -1, rows_n, 1) * scale.view(k, 1, 1, 1)).view(
            batch, rows_n, 1
        )
        if k > 1:
            out = self._work((batch, rows_n, cols_n), g, 1)
            torch.mul(g, scaled_rows, out=out)
            params = consecutive(ps)
            if params is not None:
                params.view(batch, rows_n, cols_n).addcmul_(out, col_factor)
                return
            out.mul_(col_factor)
            parts = out.unbind(0) if len(shape) == 2 else [x.view(shape) for x in out.chunk(k)]
            torch._foreach_add_(ps, list(parts))
            return
        target = ps[0].view(batch, rows_n, cols_n) if dense else None
        for r0, r1 in spans:
            out = self._work((batch, r1 - r0, cols_n), g, 1)
            torch.mul(g[:, r0:r1], scaled_rows[:, r0:r1], out=out)
            if target is None:
                ps[0].addcmul_(out.view(shape), col_factor.view(*shape[:-2], 1, cols_n))
            else:
                target[:, r0:r1].addcmul_(out, col_factor)

    def _factors(
        self,
        g: torch.Tensor,
        spans: list[tuple[int, int]],
        states: list[dict[str, Any]],
        beta: float,
        eps1: float,
        k: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Pass 1: update the row/column statistics of ``u = g^2 + eps1``; return the factors.

        ``mean(g^2) + eps1`` stands for ``mean(g^2 + eps1)`` (equal up to rounding). With a single
        row block, ``g^2`` is still in cache for the update's RMS, which is returned too.
        """
        batch, rows_n, cols_n = g.shape
        row_state = [s["exp_avg_sq_row"] for s in states]
        col_state = [s["exp_avg_sq_col"] for s in states]
        row, col = _stacked(row_state, rows_n), _stacked(col_state, cols_n)
        row_mean = torch.empty(batch, rows_n, dtype=_acc_dtype(g), device=g.device)
        col_mean = torch.zeros(batch, cols_n, dtype=_acc_dtype(g), device=g.device)
        u = g
        for r0, r1 in spans:
            u = self._work((batch, r1 - r0, cols_n), g, 0, _acc_dtype(g))
            torch.mul(g[:, r0:r1], g[:, r0:r1], out=u)
            torch.mean(u, dim=-1, out=row_mean[:, r0:r1])
            col_mean += u.sum(dim=-2) if len(spans) > 1 else u.mean(dim=-2)
        if len(spans) > 1:
            col_mean.div_(rows_n)
        row.mul_(beta).add_(row_mean.add_(eps1), alpha=1 - beta)
        col.mul_(beta).add_(col_mean.add_(eps1), alpha=1 - beta)
        _unstack(row, row_state, k)
        _unstack(col, col_state, k)
        row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        col_factor = col.unsqueeze(-2).rsqrt()
        squares = None
        if len(spans) == 1:
            weights = col_factor.to(u.dtype).square().mT
            rows_sq = row_factor.to(u.dtype).square()
            squares = (torch.bmm(u, weights) * rows_sq).sum(dim=(-2, -1))
        return row_factor, col_factor, squares

    def _work(
        self,
        shape: tuple[int, ...],
        like: torch.Tensor,
        slot: int,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """A cache-resident work buffer of ``shape`` (block scratch ``slot``)."""
        dtype = dtype or like.dtype
        return self.work_buffer(math.prod(shape), like.device, dtype, slot + 8).view(shape)


@attrs.frozen
class _NativePlan:
    """How the native kernels step a group's matrices (:meth:`Adafactor._native_plan`)."""

    identity: tuple[int, ...]
    pointers: tuple[int, ...]
    done: list[int]
    large: list[int]
    # (rows, cols, beta or 0.0 when all agree) -> (first index, count, pointer arrays)
    small: dict[tuple[int, int, float], tuple[int, int, tuple[ctypes.Array[ctypes.c_void_p], ...]]]


def _plan_pointers(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    states: list[dict[str, Any]],
    done: list[int],
) -> tuple[int, ...]:
    """The data pointers a plan was made for: each stepped matrix's, gradient's, statistics'."""
    return tuple(
        pointer
        for i in done
        for pointer in (
            params[i].data_ptr(),
            grads[i].data_ptr(),
            states[i]["exp_avg_sq_row"].data_ptr(),
            states[i]["exp_avg_sq_col"].data_ptr(),
        )
    )


def _pointers(tensors: list[torch.Tensor]) -> ctypes.Array[ctypes.c_void_p]:
    """The data pointers of ``tensors`` as a C array."""
    return (ctypes.c_void_p * len(tensors))(*[t.data_ptr() for t in tensors])


def _rows_in_parallel(
    kernels: _native.NativeKernels,
    p: torch.Tensor,
    g: torch.Tensor,
    row: torch.Tensor,
    col: torch.Tensor,
    scalars: list[float],
    scale_parameter: bool,
) -> None:
    """One large matrix's step: three passes, each split by rows between the threads."""
    beta, keep, eps1, eps2, lr, wd, clip = scalars
    rows_n, cols_n = p.shape
    threads = kernels.threads(p.numel())
    row_sums = torch.empty(rows_n, dtype=torch.float64)
    col_sums = torch.zeros(threads, cols_n, dtype=torch.float32)  # one row per thread
    sums = torch.zeros(threads, dtype=torch.float64)
    _native.op("adafactor_stats")(rows_n, cols_n, threads, p, g, row_sums, col_sums, sums)
    root = math.sqrt(p.numel())
    rho = lr * max(math.sqrt(float(sums.sum())) / root, eps2) if scale_parameter else lr
    row.mul_(beta).add_(row_sums.div_(cols_n).float().add_(eps1), alpha=keep)
    col.mul_(beta).add_(col_sums.sum(0).div_(rows_n).add_(eps1), alpha=keep)
    row_factor = (row / row.mean()).rsqrt_()
    col_factor = col.rsqrt()
    sums.zero_()
    _native.op("adafactor_rms")(rows_n, cols_n, threads, g, row_factor, col_factor, sums)
    update_rms = math.sqrt(float(sums.sum())) / root
    scale = -rho / max(update_rms / clip, 1.0)
    decay = 1 - wd * rho if wd != 0 else 1.0
    _native.op("adafactor_apply")(
        rows_n, cols_n, threads, p, g, row_factor, col_factor, scale, decay
    )


@attrs.frozen
class _Hyper:
    wd: float
    eps1: float
    clip: float


def _stacked(states: list[torch.Tensor], last: int) -> torch.Tensor:
    """Statistics of a batch as one ``(batch, last)`` tensor (a view when they lie together)."""
    together = consecutive(states) if len(states) > 1 else states[0]
    if together is not None:
        return together.view(-1, last)
    if states[0].dim() == 1:
        return torch.stack(states)
    return torch.cat([s.reshape(-1, last) for s in states])


def _unstack(values: torch.Tensor, states: list[torch.Tensor], k: int) -> None:
    """Write a batch's statistics back (nothing to do when ``values`` is a view of them)."""
    if values.data_ptr() == states[0].data_ptr():
        return
    if states[0].dim() == 1:
        torch._foreach_copy_(states, list(values.unbind(0)))
        return
    torch._foreach_copy_(
        states, [x.view_as(s) for x, s in zip(values.chunk(k), states, strict=True)]
    )


def _acc_dtype(x: torch.Tensor) -> torch.dtype:
    """Sums of squares in float32 at least (float64 for float64 tensors)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32
