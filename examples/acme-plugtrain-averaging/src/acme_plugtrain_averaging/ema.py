"""``WeightEMA``: evaluates an exponential moving average of the weights.

It uses only the documented callback protocol (:class:`plugtrain.protocols.Callback`): the
average is updated after every optimizer step, swapped in when an evaluation starts and out
when it ends. Because plugtrain calls the closing hooks in reverse list order, it nests with any
other callback that swaps weights, and with the optimizer's own ``eval()`` (outermost).
"""

from __future__ import annotations

from typing import Any

import torch

from acme_plugtrain_averaging.schemas import WeightEMAArgs
from plugtrain.schema import validated_arguments

__all__ = ["WeightEMA"]


class WeightEMA:
    """``ema = decay * ema + (1 - decay) * w`` after every optimizer step; evaluated instead."""

    def __init__(self, decay: float = 0.99) -> None:
        checked = validated_arguments(WeightEMAArgs, {"decay": decay}, owner="WeightEMA")
        self.decay: float = checked["decay"]
        self.average: dict[str, torch.Tensor] = {}
        self._kept: dict[str, torch.Tensor] = {}

    @staticmethod
    def _weights(trainer: Any) -> dict[str, torch.Tensor]:
        return dict(trainer.model.named_parameters())

    @torch.no_grad()
    def on_after_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        """Fold the new weights into the average."""
        for name, weight in self._weights(trainer).items():
            if name not in self.average:
                self.average[name] = weight.detach().clone()
            else:
                self.average[name].lerp_(weight.detach(), 1 - self.decay)

    @torch.no_grad()
    def on_validate_start(self, trainer: Any) -> None:
        """Keep the weights and put the average in their place."""
        for name, weight in self._weights(trainer).items():
            if name in self.average:
                self._kept[name] = weight.detach().clone()
                weight.copy_(self.average[name])

    @torch.no_grad()
    def on_validate_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Put the kept weights back."""
        for name, weight in self._weights(trainer).items():
            if name in self._kept:
                weight.copy_(self._kept.pop(name))

    def state_dict(self) -> dict[str, Any]:
        """The average (tensors only: it loads with ``weights_only=True``)."""
        return {"average": {k: v.clone() for k, v in self.average.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the average."""
        self.average = {k: v.clone() for k, v in state["average"].items()}
