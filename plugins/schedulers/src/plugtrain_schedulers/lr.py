"""Learning-rate schedulers."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain.schema import REQUIRED, validated_arguments
from plugtrain_schedulers import curves
from plugtrain_schedulers._base import Scheduler
from plugtrain_schedulers.schemas import LinearLRArgs

__all__ = ["LinearLR"]


class LinearLR(Scheduler):
    """Linear ramp of the learning rate from ``initial_learning_rate`` to ``end_learning_rate``."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        initial_learning_rate: float = REQUIRED,
        end_learning_rate: float = REQUIRED,
        total_iters: int = REQUIRED,
        cycle: bool = False,
        param_group_tags: Any = None,
    ) -> None:
        args = validated_arguments(
            LinearLRArgs,
            {
                "initial_learning_rate": initial_learning_rate,
                "end_learning_rate": end_learning_rate,
                "total_iters": total_iters,
                "cycle": cycle,
                "param_group_tags": param_group_tags,
            },
            owner="LinearLR",
        )
        self.initial = float(args["initial_learning_rate"])
        self.end = float(args["end_learning_rate"])
        self.total_iters = int(args["total_iters"])
        self.cycle = bool(args["cycle"])
        super().__init__(optimizer, param_group_tags)

    def value(self, step: int) -> float:
        """The learning rate at ``step``."""
        return curves.polynomial(step, self.initial, self.end, self.total_iters, 1.0, self.cycle)
