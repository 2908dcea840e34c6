"""The NaN guard: what a step with a non-finite loss or gradients does (``loop.nan_policy``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from plugtrain.config.sections import LoopSettings
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import TrainingError
from plugtrain.train.distributed import local_tensor

__all__ = ["GuardedTrainer", "NonFiniteGuard", "first_non_finite"]

log = logging.getLogger("plugtrain")


class GuardedTrainer(Protocol):
    """What :class:`NonFiniteGuard` reads of the trainer it guards."""

    @property
    def global_step(self) -> int:
        """The last step taken (the guarded one is the next)."""

    @property
    def last_good_checkpoint(self) -> Path | None:
        """Named in a stop message: where to resume from."""

    @property
    def unwrapped_model(self) -> nn.Module:
        """Its parameters are checked for NaN and infinity."""

    @property
    def optimizer(self) -> Any:
        """A skipped step's gradients are dropped (``zero_grad``)."""

    @property
    def strategy(self) -> ParallelStrategy:
        """The processes agree through its ``reduce_sums``."""

    @property
    def loop(self) -> LoopSettings | None:
        """``nan_policy`` and ``max_consecutive_skips``."""


class NonFiniteGuard:
    """Stops training on a non-finite step, or skips it under ``nan_policy: skip_step``.

    :param trainer: the trainer it guards.
    """

    def __init__(self, trainer: GuardedTrainer) -> None:
        self.trainer = trainer
        self.skipped_in_a_row = 0

    def kept(self) -> str:
        """The end of a stop message: where the last good checkpoint is."""
        last_good = self.trainer.last_good_checkpoint
        if last_good is None:
            return "; no checkpoint of this fit was saved"
        return f"; the last good checkpoint is {last_good}"

    def non_finite_weight(self) -> str | None:
        """The first parameter holding NaN or infinity, else ``None``.

        Under FSDP2 each process sees its shards only: the processes agree (one all-reduce),
        so that all of them stop together.
        """
        trainer = self.trainer
        parameters = dict(trainer.unwrapped_model.named_parameters())
        if not trainer.strategy.sharded_parameters:
            return first_non_finite(parameters, parameters)
        shards = {name: local_tensor(p) for name, p in parameters.items()}
        bad = first_non_finite(shards, shards)
        found = trainer.strategy.reduce_sums({"non_finite": float(bad is not None)})
        if not found["non_finite"]:
            return None
        return bad or "a shard held by another process"

    def agreed_finite(self, loss_finite: bool) -> bool:
        """Whether every process's loss of this step is finite (``nan_policy: skip_step``).

        One small reduction per step when several processes skip steps: a NaN on one rank
        reaches every rank's gradients through their reduction, so all must skip the step
        together. Under ``stop`` (and in one process) nothing is reduced.
        """
        trainer = self.trainer
        strategy = trainer.strategy
        if int(getattr(strategy, "world_size", 1)) <= 1:
            return loss_finite
        if trainer.loop is None or trainer.loop.nan_policy != "skip_step":
            return loss_finite
        flags = strategy.reduce_sums({"non_finite": 0.0 if loss_finite else 1.0})
        return bool(flags["non_finite"] == 0)

    def step_done(self, problem: str | None, loss_finite: bool, cause: str = "") -> None:
        """React to an optimizer step: ``problem`` says what was not finite (``None``: fine).

        :param cause: why, when known, said after the step (``": its batch holds no example
            ..."``).
        :raises TrainingError: when the run must stop.
        """
        if problem is None:
            self.skipped_in_a_row = 0
            return
        trainer = self.trainer
        step = trainer.global_step + 1
        if trainer.loop is None or trainer.loop.nan_policy != "skip_step":
            message = (
                f"{problem} at step {step}{cause}; training stopped{self.kept()} "
                "(loop.nan_policy: skip_step drops such steps instead)"
            )
            raise TrainingError(message)
        trainer.optimizer.zero_grad(set_to_none=True)
        log.warning(
            "step %d: %s%s; its update was skipped (nan_policy: skip_step)", step, problem, cause
        )
        self.skipped_in_a_row += 1
        self._check_skipping("loss was" if not loss_finite else "gradients were")

    def _check_skipping(self, what: str) -> None:
        """Under ``skip_step``, stop when skipping cannot help: weights gone, or too many skips."""
        trainer = self.trainer
        step = trainer.global_step + 1
        bad = self.non_finite_weight()
        if bad is not None:
            message = (
                f"the weights are not finite at step {step} (NaN or infinity in {bad}): "
                f"skipping steps cannot recover them; training stopped{self.kept()}"
            )
            raise TrainingError(message)
        assert trainer.loop is not None  # step_done calls this under nan_policy skip_step only
        limit = trainer.loop.max_consecutive_skips
        if self.skipped_in_a_row >= limit:
            message = (
                f"the {what} not finite for {limit} steps in a row (steps {step - limit + 1} "
                f"to {step}, nan_policy: skip_step); training stopped{self.kept()} "
                "(loop.max_consecutive_skips sets how many)"
            )
            raise TrainingError(message)

    def check_weights_before_save(self) -> None:
        """Refuse to write a checkpoint of non-finite weights (every process stops here)."""
        bad = self.non_finite_weight()
        if bad is not None:
            message = (
                f"the weights are not finite at step {self.trainer.global_step} (NaN or "
                f"infinity in {bad}); no checkpoint written; training stopped{self.kept()}"
            )
            raise TrainingError(message)


def first_non_finite(tensors: Mapping[str, Any], names: Iterable[str]) -> str | None:
    """The first of ``names`` whose tensor in ``tensors`` holds a NaN or an infinity, or ``None``.

    Only parameters are checked: buffers may hold infinities on purpose (attention masks).
    """
    for name in names:
        value = tensors.get(name)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            continue
        # A finite sum proves every element finite (a NaN or an infinity would carry into it)
        # and costs one read; a tensor whose sum is not finite is checked element by element.
        sum_not_finite = value.numel() and not bool(torch.isfinite(value.sum()))
        if sum_not_finite and not bool(torch.isfinite(value).all()):
            return name
    return None
