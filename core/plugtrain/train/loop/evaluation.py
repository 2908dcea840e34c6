"""Evaluation: ``evaluate``, the evaluations inside ``fit``, ``validate`` and ``validate_all``."""

from __future__ import annotations

import glob
import logging
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from plugtrain._unset import UNSET
from plugtrain.config.sections import LoopSettings
from plugtrain.contract.protocols import Backend, CheckpointFolder, TrainerView
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import CheckpointError, TrainingError
from plugtrain.train.components import evaluation_mode
from plugtrain.train.loop.batches import MetricSums, Scored
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.loop.sparsity import Sparsity
from plugtrain.train.observability import Loggers

__all__ = ["EvaluatedTrainer", "Evaluation", "Restoring", "describe_metrics"]

log = logging.getLogger("plugtrain")


class Restoring(Protocol):
    """How :class:`Evaluation` loads checkpoints (the trainer's checkpointing state)."""

    def restore(self, ckpt_path: Any) -> Path | None:
        """Load ``ckpt_path`` (unset: the newest sound one, if autoloading); the path loaded."""

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load the checkpoint at ``path``."""


class CheckpointList(CheckpointFolder, Protocol):
    """Where :class:`Evaluation` finds the checkpoints ``validate_all`` evaluates."""

    directory: Path
    name: str

    def step_of(self, path: str | Path) -> int | None:
        """The step in a checkpoint's file name (``None``: not one of this run's names)."""


class EvaluatedTrainer(TrainerView, Protocol):
    """What :class:`Evaluation` reads of the trainer whose model it scores (handed to callbacks)."""

    global_step: int

    @property
    def backend(self) -> Backend:
        """Gives this process its share of the evaluation batches."""

    @property
    def model(self) -> nn.Module:
        """Put in ``eval()`` mode for the evaluation."""

    @property
    def optimizer(self) -> Any:
        """In its evaluation mode throughout (``eval()``/``train()`` when it has them)."""

    @property
    def strategy(self) -> ParallelStrategy:
        """Sums the metrics over the processes."""

    @property
    def loop(self) -> LoopSettings | None:
        """``eval_steps``: batches per evaluation."""

    @property
    def sparsity(self) -> Sparsity | None:
        """Initialized after a checkpoint was loaded."""

    @property
    def checkpointer(self) -> CheckpointList:
        """The checkpoints ``validate_all`` finds."""

    @property
    def state(self) -> Restoring:
        """Loads the checkpoints to evaluate."""

    @property
    def callbacks_dispatch(self) -> Callbacks:
        """Its callbacks, called around each evaluation."""

    @property
    def loggers_dispatch(self) -> Loggers:
        """Its loggers, which record each evaluation's metrics."""

    def forward(self, batch: Any, model: nn.Module | None = None) -> Scored:
        """Loss, count and metrics of one batch."""


def describe_metrics(metrics: Mapping[str, float]) -> str:
    """``loss 0.1234, accuracy 0.9000``."""
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def _named_loaders(value: Any) -> list[tuple[str, Any]]:
    """``(name, loader)`` pairs: a mapping's names, else each loader's position."""
    if isinstance(value, Mapping):
        return [(str(name), loader) for name, loader in value.items()]
    if isinstance(value, list | tuple):
        return [(str(index), loader) for index, loader in enumerate(value)]
    return [("0", value)]


class Evaluation:
    """Scores a trainer's model on evaluation data.

    :param trainer: the trainer whose model, backend, callbacks and loggers take part.
    """

    def __init__(self, trainer: EvaluatedTrainer) -> None:
        self.trainer = trainer

    @torch.no_grad()
    def evaluate(
        self, dataloader: Iterable[Any], max_batches: int | None = None
    ) -> dict[str, float]:
        """Mean loss over the examples of ``dataloader``, and its other metrics.

        Accuracy for class labels the Trainer scored, the model's own metrics (weighted by each
        batch's count), and ``perplexity`` for a model with ``report_perplexity``.
        """
        trainer = self.trainer
        # This process's share of the first max_batches batches.
        dataloader = trainer.backend.prepare_eval_dataloader(dataloader, max_batches)
        was_training = trainer.model.training
        trainer.model.eval()
        loss_sum = 0.0
        correct: Any = 0
        count = examples = 0
        extra = MetricSums()
        for batch in dataloader:
            # The unwrapped model: ranks may see different numbers of evaluation batches, and
            # a DDP forward could wait on the others.
            scored = trainer.forward(batch, trainer.unwrapped_model)
            loss_sum += float(scored.loss) * scored.weight
            examples += scored.weight
            correct = correct + scored.correct
            count += scored.count
            extra.add(scored.metrics, scored.weight)
        trainer.model.train(was_training)
        totals = {
            "loss_sum": loss_sum,
            "examples": examples,
            "correct": int(correct),
            "count": count,
        }
        totals = trainer.strategy.reduce_sums({**totals, **extra.totals()})
        if not totals["examples"]:
            message = "the evaluation data (val_dataloader) is empty: it yields no example"
            raise TrainingError(message)
        metrics = {"loss": totals["loss_sum"] / max(totals["examples"], 1)}
        if totals["count"]:
            metrics["accuracy"] = totals["correct"] / totals["count"]
        if getattr(trainer.unwrapped_model, "report_perplexity", False):
            metrics["perplexity"] = math.exp(min(metrics["loss"], 700.0))
        metrics.update(MetricSums.means(totals))
        return metrics

    def run(
        self, dataloader: Iterable[Any], max_batches: int | None, split: str = "val"
    ) -> dict[str, float]:
        """:meth:`evaluate` between the callbacks' hooks, then logged under ``split``.

        The optimizer is in its evaluation mode throughout
        (:mod:`plugtrain.train.components.optimizer_mode`):
        ``optimizer.eval()`` runs before ``on_validate_start``, ``optimizer.train()`` after
        ``on_validate_end``.
        """
        trainer = self.trainer
        with evaluation_mode(trainer.optimizer):
            trainer.callbacks_dispatch.on_validate_start(trainer)
            metrics = self.evaluate(dataloader, max_batches)
            trainer.callbacks_dispatch.on_validate_end(trainer, metrics)
        trainer.loggers_dispatch.log_metrics(trainer.global_step, split, metrics)
        return metrics

    def validate(self, val_dataloader: Iterable[Any], ckpt_path: Any = UNSET) -> dict[str, float]:
        """See :meth:`plugtrain.train.trainer.Trainer.validate`."""
        trainer = self.trainer
        loaded = trainer.state.restore(ckpt_path)
        if ckpt_path is UNSET and loaded is None and trainer.last_good_checkpoint is None:
            name = trainer.checkpointer.name
            directory = trainer.checkpointer.directory
            where = "" if directory.is_dir() else "; the folder does not exist"
            message = (
                f"{directory}: no checkpoint to validate (no sound file named {name}"
                f"{where}); give ckpt_path a checkpoint, or ckpt_path: null to evaluate the "
                "untrained model"
            )
            raise CheckpointError(message)
        if trainer.sparsity is not None:
            trainer.sparsity.initialize()
        try:
            metrics = self.run(val_dataloader, self._eval_steps())
        finally:
            trainer.loggers_dispatch.close()
        log.info("validation at step %d: %s", trainer.global_step, describe_metrics(metrics))
        return metrics

    def _eval_steps(self) -> int | None:
        loop = self.trainer.loop
        return loop.eval_steps if loop else None

    def validate_all(self, val_dataloaders: Any, ckpt_paths: Any = UNSET) -> list[dict[str, Any]]:
        """See :meth:`plugtrain.train.trainer.Trainer.validate_all`."""
        trainer = self.trainer
        loaders = _named_loaders(val_dataloaders)
        paths = self._paths(ckpt_paths)
        records: list[dict[str, Any]] = []
        try:
            for path in paths:
                if path is not None:
                    self._load(path)
                if trainer.sparsity is not None:
                    trainer.sparsity.initialize()
                for name, loader in loaders:
                    # the metrics files tell checkpoints apart by step, loaders by split
                    metrics = self.run(loader, self._eval_steps(), f"validate_all/{name}")
                    where = path if path is not None else "the model as it is"
                    log.info(
                        "validation of %s on %s at step %d: %s",
                        where,
                        name,
                        trainer.global_step,
                        describe_metrics(metrics),
                    )
                    record: dict[str, Any] = {
                        "checkpoint": None if path is None else str(path),
                        "step": trainer.global_step,
                        "dataloader": name,
                    }
                    records.append({**record, **metrics})
        finally:
            trainer.loggers_dispatch.close()
        return records

    def _paths(self, ckpt_paths: Any) -> list[Path | None]:
        """The checkpoints ``validate_all`` evaluates, in order; globs expanded."""
        if ckpt_paths is None:
            return [None]
        checkpointer = self.trainer.checkpointer
        if ckpt_paths is UNSET:
            found = checkpointer.list_checkpoints()
            if not found:
                message = (
                    f"{checkpointer.directory}: no checkpoint to validate (no file named "
                    f"{checkpointer.name}); give validate_all ckpt_paths"
                )
                raise CheckpointError(message)
            return [path for _, path in reversed(found)]
        written = [ckpt_paths] if isinstance(ckpt_paths, str | os.PathLike) else list(ckpt_paths)
        paths: list[Path | None] = []
        for item in written:
            text = os.fspath(item)
            if glob.has_magic(text):
                matches = sorted(glob.glob(text), key=self._step_order)
                if not matches:
                    raise CheckpointError(f"ckpt_paths: {text!r} matches no file")
                paths.extend(Path(m) for m in matches)
            elif not Path(text).exists():  # a file, or a DCP checkpoint's folder
                raise CheckpointError(f"{text}: no such checkpoint file (ckpt_paths)")
            else:
                paths.append(Path(text))
        return paths

    def _step_order(self, path: str) -> tuple[int, str]:
        """Checkpoints of this run's file name by step, other files after them by name."""
        step = self.trainer.checkpointer.step_of(path)
        return (2**63 if step is None else step, path)

    def _load(self, path: Path) -> None:
        """Load one checkpoint of ``validate_all``; any failure names the file."""
        trainer = self.trainer
        try:
            trainer.state.load(path)
            # Records and metrics carry the checkpoint's step even when a callback
            # (LoadCheckpointStates) kept the global step from being restored.
            trainer.global_step = trainer.loaded_step or 0
        except CheckpointError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            message = f"{path}: cannot be loaded for validate_all: {type(exc).__name__}: {exc}"
            raise CheckpointError(message) from exc
