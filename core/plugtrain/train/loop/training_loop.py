"""The training loop: optimizer steps up to a target step, logging, evaluation and saving.

Each step is an :class:`.step.OptimizerStep` (``k`` micro-batches, the NaN guard, the
optimizer); the loop adds the steps of a logging window up, evaluates and saves at the settings'
steps, and stops cleanly on a signal or a failing callback.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import torch

from plugtrain.config.sections import CheckpointSettings, LoggingSettings, LoopSettings
from plugtrain.contract.protocols import CheckpointFolder, TrainerView
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import ComponentFailedError, ConfigError, ConfigIssue
from plugtrain.train.data import DataStream
from plugtrain.train.distributed import InterruptRequest, TrainingInterrupted, signal_name
from plugtrain.train.loop.batches import MetricSums
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.loop.evaluation import Evaluation
from plugtrain.train.loop.precision import Precision
from plugtrain.train.loop.step import OptimizerStep
from plugtrain.train.observability import Loggers

__all__ = [
    "LoopedTrainer",
    "TrainingLoop",
    "eval_period",
    "group_values",
    "steps_per_epoch",
    "target_step",
]

log = logging.getLogger("plugtrain")


def eval_period(frequency: int | float | None, total_steps: int) -> int:
    """Steps between evaluations (0: only at the end), Model Zoo's rule.

    An int is a number of steps; a float in (0, 1] is that fraction of the fit's steps, rounded
    up (0.25 of 100 steps: every 25).
    """
    if not frequency:
        return 0
    if isinstance(frequency, float):
        return max(math.ceil(frequency * total_steps), 1)
    return int(frequency)


def target_step(loop: LoopSettings | None, global_step: int, train_dataloader: Any) -> int:
    """The step a fit ends at: the nearest of ``max_steps``, ``num_steps`` and ``num_epochs``."""
    if loop is None:
        message = "fit needs loop settings with max_steps, num_steps or num_epochs"
        raise ConfigError([ConfigIssue("loop", message)])
    limits = []
    if loop.max_steps is not None:
        limits.append(loop.max_steps)
    if loop.num_steps is not None:
        limits.append(global_step + loop.num_steps)
    if loop.num_epochs is not None:
        per_epoch = steps_per_epoch(loop, train_dataloader)
        if per_epoch is None:
            message = "num_epochs needs a data loader with a length; use num_steps"
            raise ConfigError([ConfigIssue("loop.num_epochs", message)]) from None
        limits.append(global_step + loop.num_epochs * per_epoch)
    if not limits:
        message = "give at least one of max_steps, num_steps or num_epochs"
        raise ConfigError([ConfigIssue("loop", message)])
    return min(limits)


def steps_per_epoch(loop: LoopSettings, train_dataloader: Any) -> int | None:
    """Optimizer steps in one epoch: ``loop.steps_per_epoch``, else one pass of the data.

    :raises ConfigError: ``steps_per_epoch`` needs more batches than one pass holds.
    """
    accum = loop.grad_accum_steps
    try:
        length: int | None = len(train_dataloader)
    except TypeError:
        length = None
    wanted = loop.steps_per_epoch
    if wanted is None:
        return None if length is None else max(length // accum, 1)
    if length is not None and wanted * accum > length:
        message = (
            f"steps_per_epoch {wanted} needs {wanted * accum} batches per epoch, but the "
            f"training data loader yields {length}"
        )
        raise ConfigError([ConfigIssue("loop.steps_per_epoch", message)])
    return wanted


def _group_label(group: Mapping[str, Any], index: int) -> str:
    tags = group.get("tags")
    if tags:
        names = [tags] if isinstance(tags, str) else sorted(map(str, tags))
        return f"{index}:{'+'.join(names)}"
    return str(index)


def group_values(optimizer: Any) -> dict[str, float]:
    """Learning rate and weight decay of every param group, for metrics."""
    values: dict[str, float] = {}
    for index, group in enumerate(optimizer.param_groups):
        label = _group_label(group, index)
        values[f"lr/{label}"] = float(group["lr"])
        if "weight_decay" in group:
            values[f"weight_decay/{label}"] = float(group["weight_decay"])
    return values


def _whole_save(interrupt: InterruptRequest | None) -> AbstractContextManager[None]:
    """A save that a repeated stop signal does not tear (:meth:`InterruptRequest.saving`)."""
    return nullcontext() if interrupt is None else interrupt.saving()


class _Window:
    """What the steps since the last log line add up to."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.correct: int | torch.Tensor = 0
        self.count = 0
        self.steps = 0
        self.skipped = 0
        self.extra = MetricSums()
        self.start = time.perf_counter()


class Saving(CheckpointFolder, Protocol):
    """How the loop has the trainer's checkpoints written (the trainer's checkpointer)."""

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""

    def wait(self) -> None:
        """Return once a background save is complete."""


class LoopedTrainer(TrainerView, Protocol):
    """What :class:`TrainingLoop` reads of the trainer whose steps it runs (handed to callbacks)."""

    @property
    def model(self) -> torch.nn.Module:
        """Put in ``train()`` mode before the first step."""

    @property
    def optimizer(self) -> Any:
        """Its param groups' learning rate and weight decay are logged."""

    @property
    def strategy(self) -> ParallelStrategy:
        """Sums a logging window's metrics over the processes."""

    @property
    def loop(self) -> LoopSettings | None:
        """Evaluation frequency and batches."""

    @property
    def logging(self) -> LoggingSettings:
        """``log_steps``: how often a training record is logged."""

    @property
    def checkpoint(self) -> CheckpointSettings:
        """``steps``: how often a checkpoint is saved."""

    @property
    def precision(self) -> Precision:
        """The loss scaling's metrics."""

    @property
    def checkpointer(self) -> Saving:
        """Where the checkpoints are saved."""

    @property
    def saved_step(self) -> int:
        """The step of the last checkpoint saved (not saved again on a stop)."""

    @property
    def callbacks_dispatch(self) -> Callbacks:
        """Its callbacks, called with each logged window's record."""

    @property
    def loggers_dispatch(self) -> Loggers:
        """Its loggers, which record each logged window."""

    def save_checkpoint(self, stream: DataStream | None = None) -> Path | None:
        """Write the checkpoint of the current step."""


class TrainingLoop:
    """Runs a trainer's steps up to a target step.

    :param trainer: the trainer whose model, optimizer, callbacks and loggers run.
    :param step: one optimizer step of that trainer.
    :param evaluation: the evaluations inside ``fit``.
    """

    def __init__(self, trainer: LoopedTrainer, step: OptimizerStep, evaluation: Evaluation) -> None:
        self.trainer = trainer
        self.step = step
        self.evaluation = evaluation
        self.started_anew = False
        """Whether the fit was told ``ckpt_path: null``, which the same command repeats."""

    def run(
        self,
        stream: DataStream,
        val_dataloader: Iterable[Any] | None,
        target: int,
        interrupt: InterruptRequest | None = None,
    ) -> dict[str, float]:
        """Train until ``target``, evaluating and saving as the settings say; the last metrics.

        :raises ComponentFailedError: a callback or logger raised; the last completed step was
            saved first (:func:`stop_after_failure`).
        """
        trainer = self.trainer
        if trainer.global_step >= target and trainer.loaded_step is not None:
            log.warning(
                "nothing to train: the fit resumed at step %d and ends at step %d (loop.max_steps "
                "is already reached); raise loop.max_steps, or use num_steps, to train further",
                trainer.global_step,
                target,
            )
            return {}
        try:
            return self._run(stream, val_dataloader, target, interrupt)
        except ComponentFailedError as failure:
            stop_after_failure(self.trainer, stream, failure)
            raise  # not reached: stop_after_failure raises

    def _run(
        self,
        stream: DataStream,
        val_dataloader: Iterable[Any] | None,
        target: int,
        interrupt: InterruptRequest | None,
    ) -> dict[str, float]:
        trainer = self.trainer
        loop = trainer.loop
        assert loop is not None
        log_steps = trainer.logging.log_steps
        # A fractional eval_frequency counts from this fit's first step, an int from step 0.
        start = trainer.global_step if isinstance(loop.eval_frequency, float) else 0
        eval_every = eval_period(loop.eval_frequency, target - trainer.global_step)
        save_every = trainer.checkpoint.steps or 0
        window = _Window()
        last_val: dict[str, float] = {}
        trainer.model.train()
        while trainer.global_step < target:
            upcoming = trainer.global_step + 1
            logged = upcoming % log_steps == 0 or upcoming == target
            loss, correct, count, extra = self.step.run(stream, logged)
            finite = math.isfinite(loss)
            window.skipped += not finite  # skipped under nan_policy: skip_step
            window.loss += loss if finite else 0.0
            window.correct = window.correct + correct
            window.count += count
            if finite:
                window.extra.merge(extra)
            window.steps += 1
            step = trainer.global_step
            if step % log_steps == 0 or step == target:
                self._log_window(step, window)
                window = _Window()
            if val_dataloader is not None and eval_every and (step - start) % eval_every == 0:
                last_val = self.evaluation.run(val_dataloader, loop.eval_steps)
            if save_every and step % save_every == 0 and step != target:
                with _whole_save(interrupt):
                    trainer.save_checkpoint(stream)
            if interrupt is not None and interrupt.agreed():
                self._stop_interrupted(stream, interrupt)
        if val_dataloader is not None and not (
            eval_every and (target - start) % eval_every == 0 and last_val
        ):
            last_val = self.evaluation.run(val_dataloader, loop.eval_steps)
        with _whole_save(interrupt):
            trainer.save_checkpoint(stream)
            trainer.checkpointer.wait()  # a background save is complete before fit returns
        if interrupt is not None and interrupt.agreed(final=True):
            self._stop_interrupted(stream, interrupt)
        return last_val

    def _log_window(self, step: int, window: _Window) -> None:
        trainer = self.trainer
        elapsed = time.perf_counter() - window.start
        sums = {"loss": window.loss, "finite": window.steps - window.skipped}
        sums.update(correct=int(window.correct), count=window.count)
        values = self._window_means(sums, window.extra)
        if window.skipped:
            values["skipped_steps"] = window.skipped
        values["steps_per_second"] = window.steps / elapsed if elapsed > 0 else 0.0
        values.update(group_values(trainer.optimizer))
        values.update(trainer.precision.metrics())
        trainer.callbacks_dispatch.on_train_step_end(trainer, values)
        trainer.loggers_dispatch.log_metrics(step, "train", values)

    def _window_means(self, sums: dict[str, Any], extra: MetricSums) -> dict[str, float]:
        """Loss, accuracy and extra metrics of a logging window, over every process.

        Every process logs at the same steps, so the sums are reduced there (a copy on one).
        """
        sums = self.trainer.strategy.reduce_sums({**sums, **extra.totals()})
        finite = sums["finite"]
        values = {"loss": sums["loss"] / finite if finite else math.nan}
        if sums["count"]:
            values["accuracy"] = sums["correct"] / sums["count"]
        values.update(MetricSums.means(sums))
        return values

    def _stop_interrupted(self, stream: DataStream, interrupt: InterruptRequest) -> None:
        """Save the current step (unless just saved) and raise :class:`TrainingInterrupted`."""
        trainer = self.trainer
        with interrupt.saving():
            if trainer.saved_step != trainer.global_step:
                trainer.save_checkpoint(stream)
            trainer.checkpointer.wait()
        path = trainer.checkpointer.path(trainer.global_step)
        number = interrupt.signal_number or 2
        how = "interrupted" if number == 2 else f"interrupted by {signal_name(number)}"
        resume = (
            f"resume with the same command and --set trainer.fit.ckpt_path={path} (its "
            "ckpt_path: null starts anew)"
            if self.started_anew
            else "run the same command again to resume"
        )
        message = f"{how} at step {trainer.global_step}; checkpoint saved to {path}; {resume}"
        repeated = interrupt.repeated_while_saving
        if repeated is not None:
            again = signal_name(repeated)
            message += f" ({again} came again during the save, which was finished first)"
        raise TrainingInterrupted(message, number)


MID_STEP_HOOKS = frozenset({"on_before_optimizer_step"})
"""Hooks called inside a step, after its batches were drawn: no checkpoint fits that moment."""


def stop_after_failure(
    trainer: LoopedTrainer, stream: DataStream, failure: ComponentFailedError
) -> None:
    """Save the last completed step (unless saved, or mid-step), then raise a clear error.

    :raises ComponentFailedError: the failure, with the step and the checkpoint to resume from.
    """
    step = trainer.global_step
    saved = ""
    if failure.hook in MID_STEP_HOOKS:
        newest = trainer.last_good_checkpoint
        saved = (
            f"no checkpoint written (step {step + 1} was half done); the newest is {newest}"
            if newest
            else f"no checkpoint written (step {step + 1} was half done)"
        )
    else:
        try:
            if trainer.saved_step != step:
                trainer.save_checkpoint(stream)
            saved = f"checkpoint of step {step} saved to {trainer.checkpointer.path(step)}"
        except Exception as exc:  # noqa: BLE001 - the original failure is the one to report
            saved = f"saving the checkpoint of step {step} failed too: {exc}"
    message = (
        f"{failure} (at step {step}); training stopped; {saved}; fix or remove it and run the "
        "same command again to resume"
    )
    raise ComponentFailedError(message, failure.owner, failure.hook) from failure.__cause__
