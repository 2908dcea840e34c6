"""Lamb with the numerics of cstorch 2.10."""

from __future__ import annotations

from typing import Any

import attrs
import torch

from plugtrain_optimizers import _native
from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers._blocks import block_elements, split_blocks
from plugtrain_optimizers._ops import FOREACH, ListOps
from plugtrain_optimizers._runs import run_norms, same_size_runs, scale_runs
from plugtrain_optimizers.schemas import LambArgs

__all__ = ["Lamb"]


class Lamb(PlugtrainOptimizer):
    """Lamb as cstorch computes it (no bias correction).

    ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g^2``; ``r = m / (sqrt(v) + eps) + wd p``;
    ``trust = clamp(|p|, 0, 10) / |r|`` (1 if either norm is 0, or with ``adam=True``);
    ``p -= lr * trust * r``. Norms are computed in float32 (float64 for float64 parameters).
    """

    elementwise = False  # whole-tensor norms or matrix shapes: refused under FSDP2

    schema = LambArgs
    name = "Lamb"
    flat_by_default = True  # measured: pays even with the gradient copy
    native_kernels = True

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Step counter and zero moments."""
        state["step"] = self.new_step()
        state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One Lamb step over ``params``.

        Tensors that fit a cache block are done a block at a time: moments, ``r`` (in block
        scratch), both norms, the update. A larger tensor is cut into blocks: one pass
        updates the moments, writes ``r`` into a parameter-sized work buffer (kept between
        steps, never saved) and sums ``|r|^2`` per block; then ``r`` is applied.
        """
        beta1, beta2 = (as_float(b) for b in group["betas"])
        hyper = _Hyper(
            lr=as_float(group["lr"]),
            beta1=beta1,
            beta2=beta2,
            eps=as_float(group["eps"]),
            wd=as_float(group["weight_decay"]),
            adam=bool(group["adam"]),
        )
        lr, eps, wd, adam = hyper.lr, hyper.eps, hyper.wd, hyper.adam
        states = [self.state[p] for p in params]
        self.step_all(group, [s["step"] for s in states])
        ms, vs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        lists = [params, grads, ms, vs]
        native: set[int] = set()
        if self.use_foreach(group):  # foreach=False is the reference loop: torch operations
            flat = self.flat_lists(group, lists)
            if flat is not None:
                self._flat(params, flat, hyper)
                return
            native = self._native(params, lists, hyper)
        block = block_elements()
        if self.use_foreach(group):
            big = [
                i for i, p in enumerate(params)
                if i not in native and p.numel() > block
                and all(lst[i].is_contiguous() for lst in lists)
            ]  # fmt: skip
        else:
            big = []
        small = sorted(set(range(len(params))) - set(big) - native)
        if small:
            for ops, (ps, gs, m_, v_), _ in self.blocks(group, self.take(lists, small), flat=False):
                ratio = self.block_scratch(ps, 0)
                self._moments(ops, gs, m_, v_, beta1, beta2)
                self._ratio(ops, ratio, ps, m_, v_, eps, wd)
                scales = [-lr] * len(ps) if adam else self._scales(ops, ps, ratio, lr)
                self._apply(ops, ps, ratio, scales)
        for i in big:
            self._large(params[i], grads[i], ms[i], vs[i], hyper)

    def _native(
        self, params: list[torch.Tensor], lists: list[list[torch.Tensor]], hyper: _Hyper
    ) -> set[int]:
        """The large float32 CPU tensors, stepped by the native kernels; their indices.

        The first pass updates the moments and sums both squared norms (in float64); the second
        computes ``r`` again from ``p``, ``m`` and ``v`` (which it reads anyway) and applies it:
        no ``r`` buffer goes through memory. Smaller tensors are left to the cache blocks.
        """
        kernels = _native.load()
        if kernels is None:
            return set()
        lr, beta1, beta2, eps, wd = hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.wd
        done = set()
        for i, p in enumerate(params):
            row = [lst[i] for lst in lists]
            if p.numel() < _native.PARALLEL_ELEMENTS or not _native.usable(row):
                continue
            sums = torch.empty(2, dtype=torch.float64)
            _native.op("lamb_moments")(*row, sums, 1 - beta1, beta2, 1 - beta2, eps, wd)
            weights, ratios = sums.tolist()
            scale = -lr if hyper.adam else -lr * _trust(weights**0.5, ratios**0.5)
            _native.op("lamb_apply")(p, row[2], row[3], scale, eps, wd)
            done.add(i)
        if done:
            torch.autograd.graph.increment_version([params[i] for i in done])
        return done

    def _flat(
        self, params: list[torch.Tensor], flat: list[list[torch.Tensor]], hyper: _Hyper
    ) -> None:
        """A flat group: the elementwise work over its buffers, the norms per parameter."""
        lr, beta1, beta2, eps, wd = hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.wd
        ops, base = FOREACH, flat[0][0]
        views = self.block_scratch(params, 4)  # per-parameter views of one work buffer (cached)
        ratio = self.work_buffer(base.numel(), base.device, base.dtype, 4)
        if views[0].data_ptr() != ratio.data_ptr():
            views = _views(ratio, params)
        for (ps, gs, ms, vs, rs), _ in split_blocks([*flat, [ratio]], []):
            self._moments(ops, gs, ms, vs, beta1, beta2)
            self._ratio(ops, rs, ps, ms, vs, eps, wd)
        if hyper.adam:
            base.add_(ratio, alpha=-lr)
            return
        runs = same_size_runs(params)
        if len(runs) * 4 > len(params):  # mostly different sizes: per-tensor kernels
            ops.mul_(views, self._scales(ops, params, views, lr))
        else:
            pairs = zip(run_norms(base, runs), run_norms(ratio, runs), strict=True)
            scales = [-lr * _trust(w, r) for w, r in pairs]
            scale_runs(ratio, runs, scales)
        base.add_(ratio)

    @staticmethod
    def _moments(ops: ListOps, gs: Any, ms: Any, vs: Any, beta1: float, beta2: float) -> None:
        ops.lerp_(ms, gs, 1 - beta1)
        ops.mul_(vs, beta2)
        ops.addcmul_(vs, gs, gs, 1 - beta2)

    @staticmethod
    def _ratio(ops: ListOps, out: Any, ps: Any, ms: Any, vs: Any, eps: float, wd: float) -> None:
        """``out = m / (sqrt(v) + eps) + wd p``."""
        ops.sqrt_into(out, vs)
        ops.add_scalar_(out, eps)
        ops.rdiv_(out, ms)
        if wd != 0:
            ops.add_(out, ps, alpha=wd)

    @staticmethod
    def _scales(ops: ListOps, ps: Any, ratio: Any, lr: float) -> list[float]:
        pairs = zip(ops.norms(ps), ops.norms(ratio), strict=True)
        return [-lr * _trust(w, r) for w, r in pairs]

    @staticmethod
    def _apply(ops: ListOps, ps: Any, ratio: Any, scales: list[float]) -> None:
        if len(set(scales)) == 1:
            ops.add_(ps, ratio, alpha=scales[0])
        else:
            ops.mul_(ratio, scales)
            ops.add_(ps, ratio)

    def _large(
        self, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, hyper: _Hyper
    ) -> None:
        """Both passes over one tensor larger than a cache block."""
        lr, beta1, beta2, eps, wd, adam = (
            hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.wd, hyper.adam
        )  # fmt: skip
        ops, block = FOREACH, block_elements()
        flat = [t.view(-1) for t in (p, g, m, v)]
        pieces = [
            [[t[start : start + block]] for t in flat] for start in range(0, p.numel(), block)
        ]
        weight_norm = 0.0 if adam else ops.norms([p])[0]
        # r goes to a parameter-sized work buffer a block at a time (pass 1), then into p.
        ratio = self.work_buffer(p.numel(), p.device, p.dtype, 4)
        squares = 0.0
        for start, (ps, gs, ms, vs) in zip(range(0, p.numel(), block), pieces, strict=True):
            self._moments(ops, gs, ms, vs, beta1, beta2)
            out = [ratio[start : start + ps[0].numel()]]
            self._ratio(ops, out, ps, ms, vs, eps, wd)
            if not adam:
                squares += ops.norms(out)[0] ** 2
        scale = -lr if adam else -lr * _trust(weight_norm, squares**0.5)
        p.add_(ratio.view(p.shape), alpha=scale)


@attrs.frozen
class _Hyper:
    """One group's Lamb hyperparameters for a step."""

    lr: float
    beta1: float
    beta2: float
    eps: float
    wd: float
    adam: bool


def _views(buffer: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    views, offset = [], 0
    for t in like:
        views.append(buffer[offset : offset + t.numel()].view(t.shape))
        offset += t.numel()
    return views


def _trust(weight_norm: float, ratio_norm: float) -> float:
    weight_norm = min(weight_norm, 10.0)
    if weight_norm > 0 and ratio_norm > 0:
        return weight_norm / ratio_norm
    return 1.0
