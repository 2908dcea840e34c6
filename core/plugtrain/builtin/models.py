"""Built-in models."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

__all__ = ["MLP"]


class MLP(nn.Sequential):
    """A multi-layer perceptron for classification: ``depth`` hidden layers of width ``hidden``.

    Layers are named ``fc1``, ``fc2``, ... (with ``norm1``, ``act1``, ``drop1`` between), so
    parameter names read ``fc1.weight``, ``fc1.bias`` as in the Model Zoo tagging examples.
    """

    def __init__(
        self,
        *,
        in_features: int,
        out_features: int,
        hidden: int = 128,
        depth: int = 1,
        dropout: float = 0.0,
        layer_norm: bool = False,
    ) -> None:
        layers: dict[str, nn.Module] = {}
        width = in_features
        for index in range(1, depth + 1):
            layers[f"fc{index}"] = nn.Linear(width, hidden)
            if layer_norm:
                layers[f"norm{index}"] = nn.LayerNorm(hidden)
            layers[f"act{index}"] = nn.ReLU()
            if dropout:
                layers[f"drop{index}"] = nn.Dropout(dropout)
            width = hidden
        layers[f"fc{depth + 1}"] = nn.Linear(width, out_features)
        super().__init__(OrderedDict(layers))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102 - nn.Module API
        outputs: torch.Tensor = super().forward(inputs.flatten(1))  # type: ignore[no-untyped-call]
        return outputs
