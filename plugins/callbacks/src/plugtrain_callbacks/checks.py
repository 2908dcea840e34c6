"""CheckLoss: a NaN or infinite loss is an error."""

from __future__ import annotations

import math

from plugtrain.errors import TrainingError
from plugtrain.protocols import TrainerView

__all__ = ["CheckLoss"]

ADVICE = (
    "This could be due to hyperparameters such as the learning rate or the batch size; try others"
)


class CheckLoss:
    """Stops training with an error when a loss is NaN or infinite (Model Zoo's ``CheckLoss``).

    It looks at every logged training record (also steps that ``loop.nan_policy: skip_step``
    skipped, which the record counts as ``skipped_steps``) and at every evaluation.
    """

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Raise :class:`~plugtrain.errors.TrainingError` for a non-finite training loss."""
        skipped = int(metrics.get("skipped_steps", 0))
        loss = metrics.get("loss", 0.0)
        if skipped or not math.isfinite(loss):
            what = f"in {skipped} of the steps up to" if skipped else "at"
            message = f"NaN or inf loss detected {what} step {trainer.global_step}. {ADVICE}"
            raise TrainingError(message)

    def on_validate_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Raise :class:`~plugtrain.errors.TrainingError` for a non-finite validation loss."""
        loss = metrics.get("loss", 0.0)
        if not math.isfinite(loss):
            message = f"{loss} validation loss detected at step {trainer.global_step}. {ADVICE}"
            raise TrainingError(message)
