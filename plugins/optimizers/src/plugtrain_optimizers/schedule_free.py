"""Schedule-Free AdamW and SGD (Defazio et al., "The Road Less Scheduled", 2024).

The formulas are those of Meta's reference implementation (``facebookresearch/schedule_free``):
the parameters hold ``y`` during training; ``z`` is kept in the state; ``eval()`` moves the
parameters to the average ``x = (y - (1 - beta) z) / beta`` and ``train()`` back to ``y``. The
mode is stored per group as ``train_mode`` so that it is part of ``state_dict()`` (plugtrain
saves checkpoints in ``eval()`` mode and calls ``train()`` when a fit starts).

``foreach=False`` steps one tensor at a time (:meth:`_ScheduleFree.update_param`, the reference
loop); the default multi-tensor path runs the same operations, in the same order, on runs of
tensors, cache blocks and (``flat``) one buffer per group, so it gives the same bits. For
float32 on the CPU it is one C loop (:mod:`~plugtrain_optimizers._native`): the same bits for
SGD, and for AdamW up to a correctly rounded square root (torch's float32 one is not always).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import AdamWScheduleFreeArgs, SGDScheduleFreeArgs

__all__ = ["AdamWScheduleFree", "SGDScheduleFree"]


class _ScheduleFree(PlugtrainOptimizer):
    """What both Schedule-Free optimizers share: the modes, the warmup and the averaging weight."""

    flat_by_default = True  # many small tensors: one kernel per operation instead of hundreds
    native_kernels = True

    def prepare_defaults(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """Add the running values of the average to the group defaults."""
        return {**defaults, "k": 0, "train_mode": True, "weight_sum": 0.0, "lr_max": -1.0}

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """``z`` (a copy of the parameter, taken again at the first step) and the method's own."""
        state["z"] = param.detach().clone(memory_format=torch.preserve_format)

    def interpolation(self, group: dict[str, Any]) -> float:
        """``beta``: the weight of ``y`` on ``x`` (``betas[0]``, or ``momentum``)."""
        raise NotImplementedError

    def _move(self, to_train: bool) -> None:
        for group in self.param_groups:
            if bool(group["train_mode"]) == to_train:
                continue
            beta = self.interpolation(group)
            weight = 1 - beta if to_train else 1 - 1 / beta
            params = [p for p in group["params"] if "z" in self.state[p]]
            if params and group["k"] > 0:
                zs = [self.state[p]["z"] for p in params]
                with torch.no_grad():
                    for ops, (ps, zs_), _ in self.blocks(group, [params, zs]):
                        ops.lerp_(ps, zs_, weight)
            group["train_mode"] = to_train

    def train(self) -> None:
        """Move the parameters to ``y``, the point gradients are taken at (idempotent)."""
        self._move(True)

    def eval(self) -> None:
        """Move the parameters to the average ``x``, the weights to evaluate (idempotent)."""
        self._move(False)

    def averaging(self, group: dict[str, Any]) -> tuple[float, float]:
        """The learning rate of this step (after warmup) and ``c_{k+1}``, the new average weight."""
        k = int(group["k"])
        warmup = int(group["warmup_steps"])
        lr = as_float(group["lr"]) * ((k + 1) / warmup if k < warmup else 1.0)
        group["scheduled_lr"] = lr
        group["lr_max"] = lr_max = max(lr, as_float(group["lr_max"]))
        weight = (k + 1) ** as_float(group["r"]) * lr_max ** as_float(group["weight_lr_power"])
        group["weight_sum"] = weight_sum = as_float(group["weight_sum"]) + weight
        return lr, (weight / weight_sum if weight_sum else 0.0)

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """One step of ``group``; refused outside ``train()`` mode."""
        if not group["train_mode"]:
            message = f"{self.name}.step() in eval() mode: call optimizer.train() first"
            raise RuntimeError(message)
        zs = [self.state[p]["z"] for p in params]
        if int(group["k"]) == 0:
            for ops, (zs_, ps), _ in self.blocks(group, [zs, params]):
                ops.copy_(zs_, ps)
        lr, ckp1 = self.averaging(group)
        if self.use_foreach(group):
            self.update_blocks(group, params, grads, zs, lr, ckp1)
        else:
            for p, g in zip(params, grads, strict=True):
                self.update_param(group, p, g, self.state[p], lr, ckp1)
        group["k"] = int(group["k"]) + 1

    def update_blocks(
        self,
        group: dict[str, Any],
        ys: list[torch.Tensor],
        grads: list[torch.Tensor],
        zs: list[torch.Tensor],
        lr: float,
        ckp1: float,
    ) -> None:
        """The multi-tensor step: :meth:`update_param`'s operations over cache blocks."""
        raise NotImplementedError

    def update_param(
        self,
        group: dict[str, Any],
        y: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        lr: float,
        ckp1: float,
    ) -> None:
        """One parameter's update."""
        raise NotImplementedError


class AdamWScheduleFree(_ScheduleFree):
    """Schedule-Free AdamW: Adam's normalized gradient, the Schedule-Free averaging."""

    schema = AdamWScheduleFreeArgs
    name = "AdamWScheduleFree"

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """``z`` and a zero second moment."""
        super().init_state(param, state, group)
        state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    def interpolation(self, group: dict[str, Any]) -> float:
        """``betas[0]``."""
        return as_float(group["betas"][0])

    def update_param(
        self,
        group: dict[str, Any],
        y: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        lr: float,
        ckp1: float,
    ) -> None:
        """``v``, ``d = g / (sqrt(v / bc2) + eps) + wd y``, then ``y`` and ``z``.

        Written with ``r = sqrt(bc2)`` as ``d = r g / (sqrt(v) + r eps) + wd y`` (equal up to
        rounding), so that without weight decay ``y`` and ``z`` take ``d`` in one ``addcdiv``
        each: 7 passes instead of 9.
        """
        beta1, beta2 = (as_float(b) for b in group["betas"])
        root = math.sqrt(1 - beta2 ** (int(group["k"]) + 1))
        decay = as_float(group["weight_decay"])
        exp_avg_sq, z = state["exp_avg_sq"], state["z"]
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.sqrt().add_(as_float(group["eps"]) * root)
        y_rate = lr * (beta1 * (1 - ckp1) - 1)
        if decay == 0:
            y.lerp_(z, ckp1)
            y.addcdiv_(grad, denom, value=root * y_rate)
            z.addcdiv_(grad, denom, value=-root * lr)
            return
        normalized = y.mul(decay).addcdiv_(grad, denom, value=root)
        y.lerp_(z, ckp1)
        y.add_(normalized, alpha=y_rate)
        z.add_(normalized, alpha=-lr)

    def update_blocks(
        self,
        group: dict[str, Any],
        ys: list[torch.Tensor],
        grads: list[torch.Tensor],
        zs: list[torch.Tensor],
        lr: float,
        ckp1: float,
    ) -> None:
        """:meth:`update_param`'s operations over cache blocks."""
        beta1, beta2 = (as_float(b) for b in group["betas"])
        root = math.sqrt(1 - beta2 ** (int(group["k"]) + 1))
        eps, decay = as_float(group["eps"]), as_float(group["weight_decay"])
        y_rate = lr * (beta1 * (1 - ckp1) - 1)
        lists = [ys, grads, zs, [self.state[p]["exp_avg_sq"] for p in ys]]
        if decay == 0:
            scalars = [beta2, 1 - beta2, eps * root, ckp1, root * y_rate, -root * lr]
            if self.run_native(group, "adamw_schedule_free_step", lists, scalars):
                return
        else:
            scalars = [beta2, 1 - beta2, eps * root, ckp1, root, decay, y_rate, lr]
            if self.run_native(group, "adamw_schedule_free_decay_step", lists, scalars):
                return
        for ops, (ys_, gs, zs_, vs), _ in self.blocks(group, lists):
            ops.mul_(vs, beta2)
            ops.addcmul_(vs, gs, gs, 1 - beta2)
            denom = self.block_scratch(ys_, 0)
            ops.sqrt_into(denom, vs)
            ops.add_scalar_(denom, eps * root)
            if decay == 0:
                ops.lerp_(ys_, zs_, ckp1)
                ops.addcdiv_(ys_, gs, denom, root * y_rate)
                ops.addcdiv_(zs_, gs, denom, -root * lr)
                continue
            normalized = self.block_scratch(ys_, 1)
            ops.mul_scalar_into(normalized, ys_, decay)
            ops.addcdiv_(normalized, gs, denom, root)
            ops.lerp_(ys_, zs_, ckp1)
            ops.add_(ys_, normalized, alpha=y_rate)
            ops.add_(zs_, normalized, alpha=-lr)


class SGDScheduleFree(_ScheduleFree):
    """Schedule-Free SGD."""

    kernels_match_torch_path = True

    schema = SGDScheduleFreeArgs
    name = "SGDScheduleFree"

    def interpolation(self, group: dict[str, Any]) -> float:
        """``momentum``."""
        return as_float(group["momentum"])

    def update_param(
        self,
        group: dict[str, Any],
        y: torch.Tensor,
        grad: torch.Tensor,
        state: dict[str, Any],
        lr: float,
        ckp1: float,
    ) -> None:
        """``g + wd y``, then ``y`` and ``z``."""
        momentum = as_float(group["momentum"])
        decay = as_float(group["weight_decay"])
        step = grad.add(y, alpha=decay) if decay != 0 else grad
        y.lerp_(state["z"], ckp1)
        y.add_(step, alpha=lr * (momentum * (1 - ckp1) - 1))
        state["z"].sub_(step, alpha=lr)

    def update_blocks(
        self,
        group: dict[str, Any],
        ys: list[torch.Tensor],
        grads: list[torch.Tensor],
        zs: list[torch.Tensor],
        lr: float,
        ckp1: float,
    ) -> None:
        """:meth:`update_param` over cache blocks (``z.sub_(d, alpha=lr)`` is ``add_`` of -lr)."""
        momentum = as_float(group["momentum"])
        decay = as_float(group["weight_decay"])
        y_rate = lr * (momentum * (1 - ckp1) - 1)
        scalars = [ckp1, decay, y_rate, lr]
        if self.run_native(group, "sgd_schedule_free_step", [ys, grads, zs], scalars):
            return
        for ops, (ys_, gs, zs_), _ in self.blocks(group, [ys, grads, zs]):
            step = gs
            if decay != 0:
                step = self.block_scratch(ys_, 0)
                ops.copy_(step, gs)
                ops.add_(step, ys_, alpha=decay)
            ops.lerp_(ys_, zs_, ckp1)
            ops.add_(ys_, step, alpha=y_rate)
            ops.add_(zs_, step, alpha=-lr)
