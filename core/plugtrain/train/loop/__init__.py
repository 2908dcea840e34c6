"""The training loop and what runs inside a step.

Batches and their loss, one optimizer step of micro-batches and its accumulation, precision,
the NaN guard, sparsity, callbacks, evaluation, and validation of checkpoints. Each part that
reads the Trainer says what it reads as a Protocol beside it (``SteppedTrainer``,
``LoopedTrainer``, ``EvaluatedTrainer``, ``ValidatedTrainer``, ``GuardedTrainer``).
"""

from __future__ import annotations

from plugtrain.train.loop.batches import (
    MetricSums,
    Scored,
    default_loss,
    move_batch,
    score_batch,
)
from plugtrain.train.loop.callbacks import Callbacks
from plugtrain.train.loop.evaluation import Evaluation
from plugtrain.train.loop.model_preparation import prepare_model
from plugtrain.train.loop.nan_guard import NonFiniteGuard, first_non_finite
from plugtrain.train.loop.precision import Precision
from plugtrain.train.loop.sparsity import Sparsity, SparsityGroup, group_from_spec, sparsity_groups
from plugtrain.train.loop.step import OptimizerStep
from plugtrain.train.loop.training_loop import (
    TrainingLoop,
    group_values,
    steps_per_epoch,
    target_step,
)
from plugtrain.train.loop.validation import Validation

__all__ = [
    "Callbacks",
    "Evaluation",
    "MetricSums",
    "NonFiniteGuard",
    "OptimizerStep",
    "Precision",
    "Scored",
    "Sparsity",
    "SparsityGroup",
    "TrainingLoop",
    "Validation",
    "default_loss",
    "first_non_finite",
    "group_from_spec",
    "group_values",
    "move_batch",
    "prepare_model",
    "score_batch",
    "sparsity_groups",
    "steps_per_epoch",
    "target_step",
]
