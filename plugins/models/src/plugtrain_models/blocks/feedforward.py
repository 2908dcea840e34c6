"""Model Zoo's two-layer feed-forward network of a transformer block: ``ffn.{0,1}``.

Layer ``i`` is ``linear_layer`` (+ ``linear_layer_for_glu`` for a GLU activation), the
activation (layer 0 only) and its dropout, so the parameters are named
``ffn.0.linear_layer.weight`` ... as in Model Zoo's ``FeedForwardNetwork``.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.layers import activation
from plugtrain_models.rules import GLU_ACTIVATIONS

__all__ = ["FeedForward", "FeedForwardLayer", "FeedForwardNetwork"]


class FeedForwardLayer(nn.Module):
    """``dropout(act(W x + b))``; for a GLU name ``dropout(act(W_glu x + b_glu) * (W x + b))``.

    :param act: an activation name of :func:`plugtrain_models.layers.activation` or a GLU name
        (``swiglu``, ``geglu``, ``reglu`` ...); ``None``: linear.
    """

    def __init__(
        self, width_in: int, width_out: int, *, bias: bool, act: str | None, dropout: float
    ) -> None:
        super().__init__()
        self.linear_layer = nn.Linear(width_in, width_out, bias=bias)
        self.glu = act in GLU_ACTIVATIONS
        if self.glu:
            assert act is not None
            self.linear_layer_for_glu = nn.Linear(width_in, width_out, bias=bias)
            act = GLU_ACTIVATIONS[act]
        self.act = activation(act) if act is not None else None
        self.dropout = nn.Dropout(dropout) if dropout else None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """The layer's output."""
        out: torch.Tensor = self.linear_layer(hidden)
        if self.glu:
            assert self.act is not None
            out = self.act(self.linear_layer_for_glu(hidden)) * out
        elif self.act is not None:
            out = self.act(out)
        return self.dropout(out) if self.dropout is not None else out


class FeedForwardNetwork(nn.Module):
    """Layers ``ffn.0``, ``ffn.1`` ... applied in turn (Model Zoo's ``FeedForwardNetwork``).

    Heads and poolers are one-layer networks: ``FeedForwardNetwork([FeedForwardLayer(...)])``.
    """

    def __init__(self, layers: list[FeedForwardLayer]) -> None:
        super().__init__()
        self.ffn = nn.ModuleList(layers)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Every layer in turn."""
        for layer in self.ffn:
            hidden = layer(hidden)
        return hidden


class FeedForward(FeedForwardNetwork):
    """``ffn.1(ffn.0(x))``: width ``d_model -> filter_size -> d_model``.

    :param dropout: after the output layer (Model Zoo's ``dropout``).
    :param inner_dropout: after the activation; ``None``: ``dropout`` (T5's ``relu_dropout_rate``).
    """

    def __init__(
        self,
        d_model: int,
        filter_size: int,
        *,
        act: str,
        bias: bool,
        dropout: float,
        inner_dropout: float | None = None,
    ) -> None:
        inner = dropout if inner_dropout is None else inner_dropout
        super().__init__(
            [
                FeedForwardLayer(d_model, filter_size, bias=bias, act=act, dropout=inner),
                FeedForwardLayer(filter_size, d_model, bias=bias, act=None, dropout=dropout),
            ]
        )
