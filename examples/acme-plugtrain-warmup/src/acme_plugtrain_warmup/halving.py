"""``HalvingLR``: a natural torch ``LRScheduler`` subclass, registered as it is."""

from __future__ import annotations

from typing import Any

import torch

from acme_plugtrain_warmup.schemas import HalvingLRArgs
from plugtrain.schema import validated_arguments

__all__ = ["HalvingLR"]


class HalvingLR(torch.optim.lr_scheduler.LRScheduler):
    """Multiplies every group's learning rate by ``factor`` every ``every`` steps (chainable)."""

    def __init__(self, optimizer: torch.optim.Optimizer, every: int, factor: float = 0.5) -> None:
        checked = validated_arguments(
            HalvingLRArgs, {"every": every, "factor": factor}, owner="HalvingLR"
        )
        self.every: int = checked["every"]
        self.factor: float = checked["factor"]
        super().__init__(optimizer)

    def get_lr(self) -> list[Any]:
        """The next values, from the groups' current ones (torch's chainable form)."""
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.every:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.factor for group in groups]
