"""ComputeNorm: the gradient and weight norms of the model, into the training metrics."""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from plugtrain.protocols import TrainerView

__all__ = ["ComputeNorm"]

LAYER = re.compile(r"(?:^|.*\.)layers\.(\d+)\.")
"""Parameters of ``...layers.<i>....`` also get a per-layer gradient norm (Model Zoo's rule)."""


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))


def _clip_coefficient(trainer: TrainerView) -> float | None:
    """What clipping by norm multiplied this step's gradients by (``None``: no such clipping).

    ``torch.nn.utils.clip_grad_norm_``'s rule: ``min(1, max_norm / (total_norm + 1e-6))``.
    """
    precision = getattr(trainer, "precision", None)
    settings = getattr(precision, "settings", None)
    max_norm = getattr(settings, "max_gradient_norm", None)
    total = getattr(precision, "last_grad_norm", None)
    if max_norm is None or total is None or not math.isfinite(total):
        return None
    return min(1.0, max_norm / (total + 1e-6))


class ComputeNorm:
    """Adds the L2 norms of the gradients and of the weights to each logged training record.

    ``model_wise_grad_norm`` is the norm of the step's gradients before clipping, as Model Zoo
    logs it (read in ``on_before_optimizer_step``, after unscaling; under
    ``precision.max_gradient_norm`` the clipped gradients are divided by the clip coefficient,
    and their own norm is ``model_wise_grad_norm_clipped``); ``model_wise_params_norm`` are the
    weights after the step; ``per_layer_grad_norm/layer_<i>`` (before clipping too) for
    parameters under ``layers.<i>.``. The norms are computed only for steps whose metrics are
    logged.
    """

    def __init__(self) -> None:
        self._logged_step = False
        self._grads: dict[str, torch.Tensor] = {}

    def on_train_step_start(self, trainer: TrainerView, step: int) -> None:
        """Note whether this step's metrics are logged (every ``logging.log_steps``)."""
        self._logged_step = step % trainer.logging.log_steps == 0 or step == trainer.target_step

    def on_before_optimizer_step(self, trainer: TrainerView, optimizer: Any) -> None:
        """Measure the gradients of a logged step."""
        if not self._logged_step:
            return
        with torch.no_grad():
            grads = [
                (name, p.grad) for name, p in trainer.model.named_parameters() if p.grad is not None
            ]
            self._grads = {}
            if not grads:
                return
            self._grads["model_wise_grad_norm"] = _norm([g for _, g in grads])
            layers: dict[str, list[torch.Tensor]] = {}
            for name, grad in grads:
                match = LAYER.match(name)
                if match:
                    layers.setdefault(match.group(1), []).append(grad)
            for layer, tensors in sorted(layers.items(), key=lambda item: int(item[0])):
                self._grads[f"per_layer_grad_norm/layer_{layer}"] = _norm(tensors)
            coefficient = _clip_coefficient(trainer)
            if coefficient is not None:
                clipped = self._grads["model_wise_grad_norm"]
                self._grads = {name: norm / coefficient for name, norm in self._grads.items()}
                self._grads["model_wise_grad_norm_clipped"] = clipped

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Add the norms to the record about to be logged."""
        for name, value in self._grads.items():
            metrics[name] = float(value)
        self._grads = {}
        with torch.no_grad():
            weights = [p for p in trainer.model.parameters() if p.requires_grad]
            if weights:
                metrics["model_wise_params_norm"] = float(_norm([w.detach() for w in weights]))
