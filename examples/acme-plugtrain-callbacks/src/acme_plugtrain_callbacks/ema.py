"""LossEMA: a callback with state, written against plugtrain.protocols.Callback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from acme_plugtrain_callbacks.schemas import LossEMAArgs
from plugtrain.schema import validated_arguments


class LossEMA:
    """Adds ``loss_ema`` to each logged training record: ``ema = d * ema + (1 - d) * loss``.

    The first record starts the average at its loss. The average is the callback's state, so it
    is saved in checkpoints and a resumed fit continues it exactly.

    :param decay: ``d``, the weight of the previous average.
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.decay: float = validated_arguments(LossEMAArgs, {"decay": decay}, owner="LossEMA")[
            "decay"
        ]
        self.average: float | None = None

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Update the average and add it to the record."""
        loss = metrics["loss"]
        if self.average is None:
            self.average = loss
        else:
            self.average = self.decay * self.average + (1 - self.decay) * loss
        metrics["loss_ema"] = self.average

    def state_dict(self) -> dict[str, Any]:
        """The average so far."""
        return {"average": self.average}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a saved average."""
        self.average = state["average"]
