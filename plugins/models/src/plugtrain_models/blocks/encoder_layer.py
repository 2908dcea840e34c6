"""Model Zoo's ``TransformerEncoderLayer``: self-attention and a feed-forward network.

post-LN (``norm_first=False``, BERT): ``x = norm1(x + D(attn(x))); x = norm2(x + ffn(x))``.
pre-LN (``norm_first=True``, ESM-2, T5): ``x = x + D(attn(norm1(x))); x = x + ffn(norm2(x))``.
D is the residual dropout (``dropout1``); the FFN drops out inside (:class:`FeedForward`).
Parameters: ``self_attn.proj_{q,k,v,output}_dense_layer``, ``ffn.ffn.{0,1}.linear_layer``,
``norm1``, ``norm2``.

Interface::

    layer = TransformerEncoderLayer(d_model, num_heads, filter_size, dropout=0.1,
                                    attention_dropout=None, ffn_dropout=None, activation="gelu",
                                    layer_norm_eps=1e-5, norm_type="layernorm", norm_first=False,
                                    head_dim=None, use_projection_bias=True,
                                    use_output_bias=True, use_ffn_bias=True, scale=None,
                                    logits_alpha=1.0)
    out = layer(x, mask=None, rotary=None, position_bias=None)

``mask``, ``rotary`` and ``position_bias`` go to :class:`MultiheadAttention` unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.blocks.attention import MultiheadAttention
from plugtrain_models.blocks.feedforward import FeedForward
from plugtrain_models.layers import make_norm

__all__ = ["TransformerEncoderLayer"]


class TransformerEncoderLayer(nn.Module):
    """One encoder block (see the module).

    :param d_model: width of the residual stream.
    :param num_heads: attention heads.
    :param filter_size: FFN width.
    :param dropout: residual and FFN-output dropout.
    :param attention_dropout: on the attention probabilities; ``None``: ``dropout``.
    :param ffn_dropout: after the FFN activation; ``None``: ``dropout``.
    :param activation: the FFN activation name (GLU names too).
    :param layer_norm_eps: epsilon of both norms.
    :param norm_type: ``layernorm``, ``rmsnorm`` or ``biasless-layernorm``.
    :param norm_first: pre-LN when true, post-LN otherwise.
    :param head_dim: per-head width (``None``: ``d_model // num_heads``).
    :param use_projection_bias: q, k, v biases.
    :param use_output_bias: attention output-projection bias.
    :param use_ffn_bias: FFN biases.
    :param scale: the score factor ``c`` (``None``: ``1/sqrt(head_dim)``).
    :param logits_alpha: multiplies the attention scores.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        filter_size: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        ffn_dropout: float | None = None,
        activation: str = "gelu",
        layer_norm_eps: float = 1e-5,
        norm_type: str = "layernorm",
        norm_first: bool = False,
        head_dim: int | None = None,
        use_projection_bias: bool = True,
        use_output_bias: bool = True,
        use_ffn_bias: bool = True,
        scale: float | None = None,
        logits_alpha: float = 1.0,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model,
            num_heads,
            head_dim=head_dim,
            use_projection_bias=use_projection_bias,
            use_output_bias=use_output_bias,
            dropout=dropout if attention_dropout is None else attention_dropout,
            scale=scale,
            logits_alpha=logits_alpha,
        )
        self.ffn = FeedForward(
            d_model,
            filter_size,
            act=activation,
            bias=use_ffn_bias,
            dropout=dropout,
            inner_dropout=ffn_dropout,
        )
        self.norm1 = make_norm(norm_type, d_model, layer_norm_eps)
        self.norm2 = make_norm(norm_type, d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        rotary: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The block's output ``[B, S, d_model]`` for ``hidden`` ``[B, S, d_model]``."""
        if self.norm_first:
            attended = self.self_attn(self.norm1(hidden), None, mask, rotary, position_bias)
            hidden = hidden + self.dropout1(attended)
            residual: torch.Tensor = hidden + self.ffn(self.norm2(hidden))
            return residual
        attended = self.self_attn(hidden, None, mask, rotary, position_bias)
        hidden = self.norm1(hidden + self.dropout1(attended))
        out: torch.Tensor = self.norm2(hidden + self.ffn(hidden))
        return out
