"""Multi-head attention for encoders, encoder-decoders and vision towers: self or cross.

:class:`MultiheadAttention` holds Model Zoo's ``proj_{q,k,v}_dense_layer`` and
``proj_output_dense_layer``. Queries come from one input, keys and values from another (cross-
attention) or the same one; the two lengths may differ. Scores are
``(q . k^T) * scale * logits_alpha + position_bias + mask``, then a softmax over the keys,
attention dropout, ``@ v`` and the output projection. The computation is one
:func:`torch.nn.functional.scaled_dot_product_attention` call (its fused kernels), the mask
and the position bias folded into its ``attn_mask``, except for a bias that takes a gradient
(which those kernels do not give): that is computed explicitly, with SDPA's results.

Interface::

    attn = MultiheadAttention(embed_dim, num_heads, head_dim=None, kv_dim=None,
                              use_projection_bias=True, use_output_bias=True,
                              dropout=0.0, scale=None, logits_alpha=1.0)
    out = attn(query, key_value=None, mask=None, rotary=None, position_bias=None)

``query`` ``[B, T, embed_dim]``, ``key_value`` ``[B, S, kv_dim]`` (``None``: self-attention),
``mask`` boolean (``True``: visible) or additive, broadcastable to ``[B, nh, T, S]`` (see
:mod:`plugtrain_models.blocks.masks`), ``rotary`` the RoPE phases of
:func:`plugtrain_models.layers.rotary_phases` (interleaved pairs, self-attention), and
``position_bias`` an additive ``[1 or B, nh, T, S]`` bias such as T5's relative buckets.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.layers import apply_rotary

__all__ = ["MultiheadAttention", "score_scale"]

ScaleKind = Literal["sqrt_d", "d", "none"]


def score_scale(head_dim: int, kind: ScaleKind) -> float:
    """The factor ``c`` of the scores: ``1/sqrt(d)``, ``1/d`` (muP's ``scale_qk_dot_by_d``), 1."""
    if kind == "sqrt_d":
        return 1.0 / math.sqrt(head_dim)
    if kind == "d":
        return 1.0 / head_dim
    return 1.0


class MultiheadAttention(nn.Module):
    """Model Zoo's multi-head attention (``AttentionLayer``), self- or cross-attention.

    :param embed_dim: width of the query input and of the output.
    :param num_heads: heads (nh).
    :param head_dim: width of each head (``d_kv``); ``None``: ``embed_dim // num_heads``. The
        inner width ``nh * head_dim`` need not equal ``embed_dim``.
    :param kv_dim: width of the key/value input; ``None``: ``embed_dim``.
    :param use_projection_bias: biases on the q, k and v projections.
    :param use_output_bias: a bias on the output projection.
    :param dropout: dropout on the attention probabilities (training only).
    :param scale: ``c`` in the scores; ``None``: ``1/sqrt(head_dim)`` (see :func:`score_scale`).
    :param logits_alpha: multiplies the scores (``attention_logits_alpha``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        kv_dim: int | None = None,
        use_projection_bias: bool = True,
        use_output_bias: bool = True,
        dropout: float = 0.0,
        scale: float | None = None,
        logits_alpha: float = 1.0,
    ) -> None:
        super().__init__()
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(f"embed_dim {embed_dim} is not a multiple of {num_heads} heads")
            head_dim = embed_dim // num_heads
        kv_dim = embed_dim if kv_dim is None else kv_dim
        inner = num_heads * head_dim
        self.num_heads, self.head_dim = num_heads, head_dim
        self.proj_q_dense_layer = nn.Linear(embed_dim, inner, bias=use_projection_bias)
        self.proj_k_dense_layer = nn.Linear(kv_dim, inner, bias=use_projection_bias)
        self.proj_v_dense_layer = nn.Linear(kv_dim, inner, bias=use_projection_bias)
        self.proj_output_dense_layer = nn.Linear(inner, embed_dim, bias=use_output_bias)
        c = score_scale(head_dim, "sqrt_d") if scale is None else scale
        self.scale = c * logits_alpha
        self.dropout = dropout

    def _heads(self, projected: torch.Tensor) -> torch.Tensor:
        """``[B, L, nh * d]`` as ``[B, L, nh, d]``."""
        shaped: torch.Tensor = projected.unflatten(-1, (self.num_heads, self.head_dim))
        return shaped

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        rotary: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend from ``query`` to ``key_value`` (itself when ``None``); see the module.

        :returns: ``[B, T, embed_dim]`` (not dropped out: the layer does that).
        """
        source = query if key_value is None else key_value
        q = self._heads(self.proj_q_dense_layer(query))
        k = self._heads(self.proj_k_dense_layer(source))
        v = self._heads(self.proj_v_dense_layer(source))
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        bias = _attention_bias(mask, position_bias, q.dtype)
        dropout = self.dropout if self.training else 0.0
        if bias is not None and bias.requires_grad and torch.is_grad_enabled():
            attended = _explicit_attention(q, k, v, bias, dropout, self.scale)
        else:
            attended = functional.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=dropout, scale=self.scale
            )
        merged = attended.transpose(1, 2).flatten(2)  # [B, T, nh * d]
        out: torch.Tensor = self.proj_output_dense_layer(merged)
        return out


def _attention_bias(
    mask: torch.Tensor | None, position_bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor | None:
    """One ``attn_mask`` for SDPA: a boolean mask as is, else the additive sum in ``dtype``."""
    if position_bias is None:
        if mask is None or mask.dtype == torch.bool:
            return mask
        return mask.to(dtype)
    bias = position_bias.to(dtype)
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, float("-inf"))
    return bias + mask.to(dtype)


def _explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor,
    dropout: float,
    scale: float,
) -> torch.Tensor:
    """``softmax(q k^T scale + bias) v``, a query whose keys are all hidden getting zeros.

    SDPA's fused CPU kernels take no gradient for ``attn_mask``, so a learned bias (T5's relative
    positions) sends it down its composite path, which scales q and k apart and masks the
    probabilities of rows without a visible key over the whole score tensor. This scales q
    once and looks for such rows in one read of the row maxima, fixing them only when present.
    Half-precision inputs on the CPU are computed in float32 and rounded back, as SDPA's
    composite path does there.
    """
    dtype = q.dtype
    if q.device.type == "cpu" and dtype in (torch.bfloat16, torch.float16):
        with torch.autocast("cpu", enabled=False):
            wide = _explicit_attention(
                q.float(), k.float(), v.float(), bias.float(), dropout, scale
            )
        return wide.to(dtype)
    scores = torch.matmul(q * scale, k.transpose(-1, -2)) + bias
    probabilities = torch.softmax(scores, dim=-1)
    hidden = torch.isneginf(scores.detach().amax(dim=-1, keepdim=True))
    if bool(hidden.any()):
        probabilities = probabilities.masked_fill(hidden, 0.0)
    if dropout:
        probabilities = functional.dropout(probabilities, dropout)
    return torch.matmul(probabilities, v)
