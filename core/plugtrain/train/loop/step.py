"""One optimizer step: ``k`` micro-batches, their backward passes, the optimizer's step.

The step runs ``loop.grad_accum_steps`` micro-batches, each in the context the parallel strategy
gives (:mod:`plugtrain.strategy`; only the last one synchronises gradients in a data-parallel
run). The losses are averaged as ``loop.loss_averaging`` says (:mod:`.accumulation`), summed on
the device and read once per step, for the NaN guard, which must decide before the next step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import torch

from plugtrain.config.sections import LoopSettings
from plugtrain.contract.protocols import TrainerView
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import CheckpointMismatchError, PlugtrainError
from plugtrain.train.data import DataStream
from plugtrain.train.loop.accumulation import StepLoss
from plugtrain.train.loop.batches import MetricSums, Scored
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.loop.nan_guard import NonFiniteGuard
from plugtrain.train.loop.precision import Precision
from plugtrain.train.loop.sparsity import Sparsity

__all__ = ["OptimizerStep", "SteppedTrainer"]


class SteppedTrainer(TrainerView, Protocol):
    """What :class:`OptimizerStep` reads of the trainer it steps (handed to callbacks)."""

    global_step: int

    @property
    def model(self) -> torch.nn.Module:
        """Run in the strategy's micro-batch context."""

    @property
    def optimizer(self) -> Any:
        """Stepped through the precision (loss scaling, clipping)."""

    @property
    def schedulers(self) -> list[Any]:
        """Stepped after each optimizer step."""

    @property
    def strategy(self) -> ParallelStrategy:
        """Micro-batch contexts, and the processes a gradient averages over."""

    @property
    def loop(self) -> LoopSettings | None:
        """``grad_accum_steps`` and ``loss_averaging``."""

    @property
    def sparsity(self) -> Sparsity | None:
        """Told where each step starts and ends; its gradients count in the step's."""

    @property
    def precision(self) -> Precision:
        """Backward and the optimizer's step."""

    @property
    def loaded_step(self) -> int | None:
        """The first step after a load blames a failing optimizer state on the checkpoint."""

    @property
    def last_good_checkpoint(self) -> Path | None:
        """The checkpoint blamed."""

    @property
    def callbacks_dispatch(self) -> Callbacks:
        """Its callbacks, called at each point of a step."""

    def forward(self, batch: Any, model: torch.nn.Module | None = None) -> Scored:
        """Loss, count and metrics of one batch."""


def _empty_batches(empty: int, accum: int) -> str:
    """Why a step's loss is not finite when some of its batches held no example."""
    if not empty:
        return ""
    which = "its batch holds" if accum == 1 else f"{empty} of its {accum} micro-batches hold"
    return f": {which} no example (the training data yielded an empty batch)"


@contextmanager
def _metrics_wanted(model: Any, wanted: bool) -> Iterator[None]:
    """``model.metrics_wanted = wanted`` for one step, when the model declares that attribute.

    The Model protocol's optional member: a model that declares ``metrics_wanted`` may skip
    computing its metrics (not its loss) on the training steps whose metrics are not logged.
    """
    if not hasattr(model, "metrics_wanted"):
        yield
        return
    before = model.metrics_wanted
    model.metrics_wanted = wanted
    try:
        yield
    finally:
        model.metrics_wanted = before


class OptimizerStep:
    """Runs one optimizer step of a trainer.

    :param trainer: the trainer whose model, optimizer, schedulers and callbacks run.
    :param guard: what a non-finite step does.
    """

    def __init__(self, trainer: SteppedTrainer, guard: NonFiniteGuard) -> None:
        self.trainer = trainer
        self.guard = guard

    def run(self, stream: DataStream, logged: bool = True) -> tuple[float, Any, int, MetricSums]:
        """One optimizer step; returns its loss, correct labels, label count and metrics.

        :param logged: whether this step's metrics are logged; when not, a model declaring
            ``metrics_wanted`` is told so and may leave its metrics out.
        """
        trainer = self.trainer
        trainer.callbacks_dispatch.on_train_step_start(trainer, trainer.global_step + 1)
        accum = trainer.loop.grad_accum_steps if trainer.loop else 1
        trainer.optimizer.zero_grad(set_to_none=True)
        if trainer.sparsity is not None:
            trainer.sparsity.step_start()
        mode = trainer.loop.loss_averaging if trainer.loop else "global"
        strategy = trainer.strategy
        step_loss = StepLoss(mode, accum, getattr(strategy, "world_size", 1))
        correct: Any = 0
        count = 0
        extra = MetricSums()
        empty = 0
        for index in range(accum):
            with strategy.micro_batch_context(trainer.model, synchronize=index == accum - 1):
                with _metrics_wanted(trainer.unwrapped_model, logged):
                    scored = trainer.forward(stream.next())
                trainer.precision.backward(step_loss.to_backward(scored.loss, scored.weight))
            empty += scored.weight == 0
            step_loss.add(scored.loss, scored.weight)
            correct = correct + scored.correct
            count += scored.count
            extra.add(scored.metrics, scored.weight)
        total_loss = step_loss.finish(strategy, self._step_gradients())
        finite = self.guard.agreed_finite(math.isfinite(total_loss))
        if finite:
            problem = self._optimizer_step()
        elif math.isfinite(total_loss):
            problem = "the loss is not finite on another process"
            total_loss = math.nan  # this step counts as skipped here too
        else:
            problem = f"the loss is {total_loss}"
        cause = _empty_batches(empty, accum) if not math.isfinite(total_loss) else ""
        self.guard.step_done(problem, finite, cause)
        if trainer.sparsity is not None:
            trainer.sparsity.step_end()  # masks change only if the optimizer applied the step
        trainer.callbacks_dispatch.on_after_optimizer_step(trainer, trainer.optimizer)
        for scheduler in trainer.schedulers:
            scheduler.step()
        trainer.global_step += 1
        return total_loss, correct, count, extra

    def _step_gradients(self) -> list[torch.Tensor]:
        """The gradients one optimizer step accumulated: the parameters' and sparsity's."""
        trainer = self.trainer
        groups = trainer.optimizer.param_groups
        grads = [p.grad for group in groups for p in group["params"] if p.grad is not None]
        if trainer.sparsity is not None:
            grads.extend(trainer.sparsity.saved_gradients())
        return grads

    def _optimizer_step(self) -> str | None:
        """The optimizer's step; the first one after loading a checkpoint blames its state.

        A state the optimizer cannot use (a key renamed or missing, another version of the
        optimizer wrote it) is found only when the optimizer reads it, at that step.
        """
        trainer = self.trainer
        step: str | None
        if trainer.loaded_step is None or trainer.global_step != trainer.loaded_step:
            step = trainer.precision.step(trainer.optimizer, self._before_optimizer_step)
            return step
        try:
            step = trainer.precision.step(trainer.optimizer, self._before_optimizer_step)
        except PlugtrainError:
            raise
        except (KeyError, IndexError, ValueError, TypeError, RuntimeError) as exc:
            written = type(trainer.optimizer).__name__
            message = (
                f"{trainer.last_good_checkpoint}: does not fit this run: optimizer: its state "
                f"failed at the first step after loading it ({type(exc).__name__}: {exc}); a "
                f"state key {written} needs is missing or renamed (was the checkpoint written by "
                "another version of the optimizer?)"
            )
            raise CheckpointMismatchError(message) from exc
        return step

    def _before_optimizer_step(self) -> None:
        trainer = self.trainer
        trainer.callbacks_dispatch.on_before_optimizer_step(trainer, trainer.optimizer)
