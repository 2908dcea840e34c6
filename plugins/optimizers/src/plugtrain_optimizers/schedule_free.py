"""Schedule-Free AdamW and SGD (Defazio et al., "The Road Less Scheduled", 2024).

The numerics are those of Meta's reference implementation (``facebookresearch/schedule_free``):
the parameters hold ``y`` during training; ``z`` is kept in the state; ``eval()`` moves the
parameters to the average ``x = (y - (1 - beta) z) / beta`` and ``train()`` back to ``y``. The
mode is stored per group as ``train_mode`` so that it is part of ``state_dict()`` (plugtrain
saves checkpoints in ``eval()`` mode and calls ``train()`` when a fit starts).
"""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_optimizers._base import PlugtrainOptimizer, as_float
from plugtrain_optimizers.schemas import AdamWScheduleFreeArgs, SGDScheduleFreeArgs

__all__ = ["AdamWScheduleFree", "SGDScheduleFree"]


class _ScheduleFree(PlugtrainOptimizer):
    """What both Schedule-Free optimizers share: the modes, the warmup and the averaging weight."""

    blocked = False

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
            with torch.no_grad():
                for p in group["params"]:
                    z = self.state[p].get("z")
                    if z is not None and group["k"] > 0:
                        p.lerp_(z.to(p.device), weight)
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
        if int(group["k"]) == 0:
            for p in params:
                self.state[p]["z"].copy_(p)
        lr, ckp1 = self.averaging(group)
        for p, g in zip(params, grads, strict=True):
            self.update_param(group, p, g, self.state[p], lr, ckp1)
        group["k"] = int(group["k"]) + 1

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
        """``v``, ``g / (sqrt(v / bc2) + eps) + wd y``, then ``y`` and ``z``."""
        beta1, beta2 = (as_float(b) for b in group["betas"])
        k = int(group["k"])
        exp_avg_sq = state["exp_avg_sq"]
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denom = exp_avg_sq.div(1 - beta2 ** (k + 1)).sqrt_().add_(as_float(group["eps"]))
        normalized = grad.div(denom)
        decay = as_float(group["weight_decay"])
        if decay != 0:
            normalized.add_(y, alpha=decay)
        y.lerp_(state["z"], ckp1)
        y.add_(normalized, alpha=lr * (beta1 * (1 - ckp1) - 1))
        state["z"].sub_(normalized, alpha=lr)


class SGDScheduleFree(_ScheduleFree):
    """Schedule-Free SGD."""

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
