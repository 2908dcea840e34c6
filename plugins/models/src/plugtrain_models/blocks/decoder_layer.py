"""Model Zoo's ``TransformerDecoderLayer`` with cross-attention, and the decoder stack.

A block attends causally to its own sequence (``self_attn``), then to the encoder's output
(``multihead_attn``), then runs a feed-forward network (``ffn``):

- pre-LN (``norm_first``, T5): ``x = x + D(sa(norm1(x))); x = x + D(ca(norm2(x), m));
  x = x + ffn(norm3(x))``;
- post-LN (the transformer): ``x = norm1(x + D(sa(x))); x = norm2(x + D(ca(x, m)));
  x = norm3(x + ffn(x))``.

D is the residual dropout; the FFN drops out inside. Parameters:
``self_attn.proj_{q,k,v,output}_dense_layer``, ``multihead_attn.proj_{q,k,v,output}_dense_layer``,
``ffn.ffn.{0,1}.linear_layer``, ``norm1``, ``norm2``, ``norm3``.
:class:`TransformerDecoder` stacks them as ``layers.N`` with a final ``norm``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from plugtrain_models.blocks.attention import MultiheadAttention
from plugtrain_models.blocks.feedforward import FeedForward
from plugtrain_models.layers import make_norm

__all__ = ["TransformerDecoder", "TransformerDecoderLayer"]


class TransformerDecoderLayer(nn.Module):
    """One decoder block with cross-attention (see the module).

    :param d_model: width of the residual stream (and of the encoder output it reads).
    :param num_heads: attention heads of both attentions.
    :param filter_size: FFN width.
    :param dropout: residual and FFN-output dropout.
    :param attention_dropout: on the attention probabilities; ``None``: ``dropout``.
    :param ffn_dropout: after the FFN activation; ``None``: ``dropout``.
    :param activation: the FFN activation name (GLU names too).
    :param layer_norm_eps: epsilon of the three norms.
    :param norm_type: ``layernorm``, ``rmsnorm`` or ``biasless-layernorm``.
    :param norm_first: pre-LN when true, post-LN otherwise.
    :param head_dim: per-head width (``d_kv``; ``None``: ``d_model // num_heads``).
    :param memory_dim: width of the encoder output (``None``: ``d_model``).
    :param use_projection_bias: q, k, v biases of both attentions.
    :param use_output_bias: output-projection biases of both attentions.
    :param use_ffn_bias: FFN biases.
    :param scale: the score factor ``c`` of both attentions (``None``: ``1/sqrt(head_dim)``).
    :param logits_alpha: multiplies the scores of both attentions.
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
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        norm_type: str = "layernorm",
        norm_first: bool = False,
        head_dim: int | None = None,
        memory_dim: int | None = None,
        use_projection_bias: bool = True,
        use_output_bias: bool = True,
        use_ffn_bias: bool = True,
        scale: float | None = None,
        logits_alpha: float = 1.0,
    ) -> None:
        super().__init__()
        probability_dropout = dropout if attention_dropout is None else attention_dropout

        def attention(kv_dim: int | None) -> MultiheadAttention:
            return MultiheadAttention(
                d_model,
                num_heads,
                head_dim=head_dim,
                kv_dim=kv_dim,
                use_projection_bias=use_projection_bias,
                use_output_bias=use_output_bias,
                dropout=probability_dropout,
                scale=scale,
                logits_alpha=logits_alpha,
            )

        self.self_attn = attention(None)
        self.multihead_attn = attention(memory_dim)
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
        self.norm3 = make_norm(norm_type, d_model, layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self,
        hidden: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        rotary: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The block's output ``[B, T, d_model]``.

        :param hidden: the decoder's stream ``[B, T, d_model]``.
        :param memory: the encoder's output ``[B, S, memory_dim]``.
        :param mask: the self-attention mask (boolean or additive, e.g. causal ``[1, 1, T, T]``).
        :param memory_mask: the cross-attention mask (e.g. the key padding ``[B, 1, 1, S]``).
        :param position_bias: added to the self-attention scores (T5's relative bias).
        :param rotary: RoPE phases of the self-attention.
        """
        if self.norm_first:
            attended = self.self_attn(self.norm1(hidden), None, mask, rotary, position_bias)
            hidden = hidden + self.dropout1(attended)
            crossed = self.multihead_attn(self.norm2(hidden), memory, memory_mask)
            hidden = hidden + self.dropout2(crossed)
            return hidden + self.ffn(self.norm3(hidden))
        attended = self.self_attn(hidden, None, mask, rotary, position_bias)
        hidden = self.norm1(hidden + self.dropout1(attended))
        crossed = self.multihead_attn(hidden, memory, memory_mask)
        hidden = self.norm2(hidden + self.dropout2(crossed))
        out: torch.Tensor = self.norm3(hidden + self.ffn(hidden))
        return out


class TransformerDecoder(nn.Module):
    """Model Zoo's ``TransformerDecoder``: ``norm(layer_L(… layer_1(x, m)))``."""

    def __init__(self, layers: Iterable[TransformerDecoderLayer], norm: nn.Module | None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.norm = norm

    def forward(
        self,
        hidden: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        rotary: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Every layer in turn (the same masks and bias), then the final norm."""
        for layer in self.layers:
            hidden = layer(hidden, memory, mask, memory_mask, position_bias, rotary)
        if self.norm is not None:
            hidden = self.norm(hidden)
        return hidden
