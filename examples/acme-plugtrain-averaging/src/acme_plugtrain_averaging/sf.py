"""``ScheduleFreeSGD``: the optimizer side of plugtrain's evaluation contract (API 1.1).

The parameters hold ``y = (1 - momentum) z + momentum x`` while training; ``eval()`` moves them
to the average ``x`` and ``train()`` back. The mode lives in the param groups, so it is part of
``state_dict()``: plugtrain saves checkpoints in ``eval()`` mode and calls ``train()`` when a
fit starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from acme_plugtrain_averaging.schemas import ScheduleFreeSGDArgs
from plugtrain.schema import validated_arguments

__all__ = ["ScheduleFreeSGD"]


class ScheduleFreeSGD(torch.optim.Optimizer):
    """Schedule-Free SGD with the averaging weight ``c_t = 1 / t``."""

    def __init__(
        self, params: Iterable[Any], lr: float, momentum: float = 0.9, weight_decay: float = 0.0
    ) -> None:
        checked = validated_arguments(
            ScheduleFreeSGDArgs,
            {"lr": lr, "momentum": momentum, "weight_decay": weight_decay},
            owner="ScheduleFreeSGD",
        )
        super().__init__(params, {**checked, "k": 0, "train_mode": True})

    def _move(self, to_train: bool) -> None:
        for group in self.param_groups:
            if group["train_mode"] == to_train:
                continue
            beta = group["momentum"]
            weight = 1 - beta if to_train else 1 - 1 / beta
            with torch.no_grad():
                for p in group["params"]:
                    z = self.state[p].get("z")
                    if z is not None:
                        p.lerp_(z, weight)
            group["train_mode"] = to_train

    def train(self) -> None:
        """Move the parameters to ``y`` (idempotent)."""
        self._move(True)

    def eval(self) -> None:
        """Move the parameters to the average ``x`` (idempotent)."""
        self._move(False)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One step; ``closure`` re-evaluates the loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if not group["train_mode"]:
                raise RuntimeError("ScheduleFreeSGD.step() in eval() mode: call train() first")
            lr, beta, decay = group["lr"], group["momentum"], group["weight_decay"]
            k = group["k"]
            c = 1 / (k + 1)
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "z" not in state:
                    state["z"] = p.detach().clone()
                grad = p.grad.add(p, alpha=decay) if decay else p.grad
                p.lerp_(state["z"], c)
                p.add_(grad, alpha=lr * (beta * (1 - c) - 1))
                state["z"].sub_(grad, alpha=lr)
            group["k"] = k + 1
        return loss
