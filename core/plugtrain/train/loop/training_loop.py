"""The training loop: optimizer steps of ``k`` micro-batches, logging, evaluation and saving.

One optimizer step runs ``loop.grad_accum_steps`` micro-batches, each in the context the
parallel strategy gives (:mod:`plugtrain.strategy`; only the last one synchronises gradients
in a data-parallel run). The losses are averaged as ``loop.loss_averaging`` says
(:mod:`.accumulation`), summed on the device and read once per optimizer step
(for the NaN guard, which must decide before the next step).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol

import torch

from plugtrain.config.sections import CheckpointSettings, LoggingSettings, LoopSettings
from plugtrain.contract.protocols import CheckpointFolder, TrainerView
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import (
    CheckpointMismatchError,
    ComponentFailedError,
    ConfigError,
    ConfigIssue,
    PlugtrainError,
)
from plugtrain.train.data import DataStream
from plugtrain.train.distributed import InterruptRequest, TrainingInterrupted, signal_name
from plugtrain.train.loop.accumulation import StepLoss
from plugtrain.train.loop.batches import MetricSums, Scored
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.loop.evaluation import Evaluation
from plugtrain.train.loop.nan_guard import NonFiniteGuard
from plugtrain.train.loop.precision import Precision
from plugtrain.train.loop.sparsity import Sparsity
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


def _empty_batches(empty: int, accum: int) -> str:
    """Why a step's loss is not finite when some of its batches held no example."""
    if not empty:
        return ""
    which = "its batch holds" if accum == 1 else f"{empty} of its {accum} micro-batches hold"
    return f": {which} no example (the training data yielded an empty batch)"


def _whole_save(interrupt: InterruptRequest | None) -> AbstractContextManager[None]:
    """A save that a repeated stop signal does not tear (:meth:`InterruptRequest.saving`)."""
    return nullcontext() if interrupt is None else interrupt.saving()


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

    global_step: int

    @property
    def model(self) -> torch.nn.Module:
        """Trained in ``train()`` mode, in the strategy's micro-batch context."""

    @property
    def optimizer(self) -> Any:
        """Stepped through the precision (loss scaling, clipping)."""

    @property
    def schedulers(self) -> list[Any]:
        """Stepped after each optimizer step."""

    @property
    def strategy(self) -> ParallelStrategy:
        """Micro-batch contexts and the sums over the processes."""

    @property
    def loop(self) -> LoopSettings | None:
        """Accumulation, loss averaging, evaluation frequency."""

    @property
    def logging(self) -> LoggingSettings:
        """``log_steps``: how often a training record is logged."""

    @property
    def checkpoint(self) -> CheckpointSettings:
        """``steps``: how often a checkpoint is saved."""

    @property
    def sparsity(self) -> Sparsity | None:
        """Told where each step starts and ends."""

    @property
    def precision(self) -> Precision:
        """Backward, the optimizer's step and the loss scaling's metrics."""

    @property
    def checkpointer(self) -> Saving:
        """Where the checkpoints are saved."""

    @property
    def saved_step(self) -> int:
        """The step of the last checkpoint saved (not saved again on a stop)."""

    def forward(self, batch: Any, model: torch.nn.Module | None = None) -> Scored:
        """Loss, count and metrics of one batch."""

    @property
    def callbacks_dispatch(self) -> Callbacks:
        """Its callbacks, called at each point of a step."""

    @property
    def loggers_dispatch(self) -> Loggers:
        """Its loggers, which record each logged window."""

    def save_checkpoint(self, stream: DataStream | None = None) -> Path | None:
        """Write the checkpoint of the current step."""


class TrainingLoop:
    """Runs a trainer's steps up to a target step.

    :param trainer: the trainer whose model, optimizer, schedulers, callbacks and loggers run.
    :param guard: what a non-finite step does.
    :param evaluation: the evaluations inside ``fit``.
    """

    def __init__(
        self, trainer: LoopedTrainer, guard: NonFiniteGuard, evaluation: Evaluation
    ) -> None:
        self.trainer = trainer
        self.guard = guard
        self.evaluation = evaluation

    def train_step(
        self, stream: DataStream, logged: bool = True
    ) -> tuple[float, Any, int, MetricSums]:
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
            loss, correct, count, extra = self.train_step(stream, logged)
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
        message = (
            f"{how} at step {trainer.global_step}; checkpoint saved to {path}; "
            "run the same command again to resume"
        )
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
