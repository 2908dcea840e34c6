"""How one optimizer step's micro-batch losses are averaged (``loop.loss_averaging``).

``global`` (the default) gives the gradient of one big batch: each micro-batch's mean loss is
back-propagated times its count (``Scored.weight``: its examples or tokens), so the gradients
hold the step's summed loss; after the last micro-batch the counts are summed over the
processes (one all-reduce of one number per step) and the gradients are multiplied by
``world_size / N``: the data-parallel synchronisation already averaged them over the
processes, so they become the sum over every example of the step divided by its ``N``
examples. The scale is applied before unscaling and clipping, and commutes with a loss scaler.

``per_micro_batch`` keeps the mean of the micro-batches' means: each loss is divided by the
number of micro-batches.

One process and one micro-batch: both are the batch's own mean loss, back-propagated as it is.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["LOSS_AVERAGING", "StepLoss"]

LOSS_AVERAGING = ("global", "per_micro_batch")
"""The values of ``loop.loss_averaging``."""


class StepLoss:
    """The losses of one optimizer step: what each micro-batch back-propagates, and the mean.

    :param mode: ``"global"`` or ``"per_micro_batch"``.
    :param micro_batches: micro-batches in the step (``loop.grad_accum_steps``).
    :param world_size: processes a gradient synchronisation averages over.
    """

    def __init__(self, mode: str, micro_batches: int, world_size: int) -> None:
        if mode not in LOSS_AVERAGING:
            raise ValueError(f"loss_averaging must be one of {LOSS_AVERAGING}, got {mode!r}")
        self.micro_batches = micro_batches
        self.world_size = world_size
        self.plain = micro_batches == 1 and (mode == "per_micro_batch" or world_size == 1)
        self.by_count = mode == "global" and not self.plain
        self.examples = 0
        self._sum: torch.Tensor | None = None

    def to_backward(self, loss: torch.Tensor, weight: int) -> torch.Tensor:
        """The tensor to back-propagate for a micro-batch of mean ``loss`` over ``weight``."""
        if self.plain:
            return loss
        if self.by_count:
            return loss * weight
        return loss / self.micro_batches

    def add(self, loss: torch.Tensor, weight: int) -> None:
        """Record a micro-batch's mean ``loss`` over ``weight`` examples (stays on the device)."""
        detached = loss.detach().to(torch.float64)
        term = detached * weight if self.by_count else detached
        self._sum = term if self._sum is None else self._sum + term
        self.examples += weight

    def finish(self, strategy: Any, gradients: list[torch.Tensor]) -> float:
        """Scale ``gradients`` in place as the mode needs; this process's step loss.

        ``gradients``: the parameters' ``.grad`` and any other gradient summed over the step's
        micro-batches (the unmasked ones sparsity saves).

        The returned loss is this process's share of the step's loss: its mean over the
        processes (what the loop's logging window computes) is the step's loss, the global
        mean over every example under ``global``.
        """
        assert self._sum is not None, "a step has at least one micro-batch"
        total = float(self._sum)  # the one read of the loss per step
        if not self.by_count:
            return total if self.plain else total / self.micro_batches
        examples = float(strategy.reduce_sums({"examples": float(self.examples)})["examples"])
        if examples <= 0:
            return total  # no example counted: the gradients are zero already
        factor = self.world_size / examples
        if gradients:
            torch._foreach_mul_(gradients, factor)
        return total * factor
