"""Built-in models."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MLP"]


class MLP(nn.Sequential):
    """A multi-layer perceptron for classification: ``depth`` hidden layers of width ``hidden``."""

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
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth):
            layers.append(nn.Linear(width, hidden))
            if layer_norm:
                layers.append(nn.LayerNorm(hidden))
            layers.append(nn.ReLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = hidden
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:  # noqa: D102 - nn.Module API
        return super().forward(inputs.flatten(1))
