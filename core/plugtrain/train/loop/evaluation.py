"""Evaluation: ``evaluate``, and one evaluation between the callbacks' hooks, logged.

``fit``'s evaluations and ``validate``/``validate_all`` (:mod:`.validation`) run it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import torch
from torch import nn

from plugtrain.contract.protocols import Backend, TrainerView
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import TrainingError
from plugtrain.train.components import evaluation_mode
from plugtrain.train.loop.batches import MetricSums, Scored
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.observability import Loggers

__all__ = ["EvaluatedTrainer", "Evaluation", "describe_metrics"]

log = logging.getLogger("plugtrain")


class EvaluatedTrainer(TrainerView, Protocol):
    """What :class:`Evaluation` reads of the trainer whose model it scores (handed to callbacks)."""

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

    def run_callbacks(self, split: str) -> dict[str, float]:
        """An evaluation without data: the callbacks' hooks alone fill the metrics (logged)."""
        trainer = self.trainer
        metrics: dict[str, float] = {}
        with evaluation_mode(trainer.optimizer):
            trainer.callbacks_dispatch.on_validate_start(trainer)
            trainer.callbacks_dispatch.on_validate_end(trainer, metrics)
        trainer.loggers_dispatch.log_metrics(trainer.global_step, split, metrics)
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
