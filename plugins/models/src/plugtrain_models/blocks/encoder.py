"""A stack of encoder layers with an optional final norm: Model Zoo's ``TransformerEncoder``.

Parameters: ``layers.N.…`` (:class:`TransformerEncoderLayer`) and ``norm`` (the final norm,
when the model has one).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from plugtrain_models.blocks.encoder_layer import TransformerEncoderLayer

__all__ = ["TransformerEncoder"]


class TransformerEncoder(nn.Module):
    """``norm(layer_L(… layer_1(x)))``, each layer given the same mask, rotary and bias."""

    def __init__(self, layers: Iterable[TransformerEncoderLayer], norm: nn.Module | None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        rotary: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Every layer in turn, then the final norm."""
        for layer in self.layers:
            hidden = layer(hidden, mask, rotary, position_bias)
        if self.norm is not None:
            hidden = self.norm(hidden)
        return hidden
