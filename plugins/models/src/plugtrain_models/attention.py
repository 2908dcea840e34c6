"""Causal self-attention with grouped k/v, RoPE, ALiBi, windows and softcapping.

Model Zoo's scores: ``s = alpha * (q c)(k c')^T [/ (layer+1)]``, softcap, ALiBi bias, mask,
softmax over keys (float32), dropout, ``@ v``, ``W_o``. Without softcapping the scores go
through :func:`torch.nn.functional.scaled_dot_product_attention` with the same scale and an
additive mask; with it, they are computed explicitly.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.layers import apply_rotary, causal_bias
from plugtrain_models.settings import DecoderSettings

__all__ = ["Attention"]


class Attention(nn.Module):
    """Model Zoo's attention: ``proj_{q,k,v}_dense_layer`` and ``proj_output_dense_layer``."""

    def __init__(self, settings: DecoderSettings, layer: int) -> None:
        super().__init__()
        s = settings
        self.heads, self.groups, self.head_dim = s.num_heads, s.num_kv_groups, s.head_dim
        kv_width = s.num_kv_groups * s.head_dim
        self.proj_q_dense_layer = nn.Linear(s.hidden_size, s.inner_dim, bias=s.qkv_bias)
        self.proj_k_dense_layer = nn.Linear(s.hidden_size, kv_width, bias=s.qkv_bias)
        self.proj_v_dense_layer = nn.Linear(s.hidden_size, kv_width, bias=s.qkv_bias)
        self.proj_output_dense_layer = nn.Linear(s.inner_dim, s.hidden_size, bias=s.out_bias)
        scale = s.attention_alpha
        scale /= math.sqrt(s.head_dim) if s.scaled else 1.0
        scale /= math.sqrt(s.head_dim) if s.qk_by_d else 1.0
        scale /= layer + 1 if s.qk_by_layer else 1
        self.scale = scale
        self.cap = s.attention_cap
        self.dropout = s.attention_dropout
        self.output_dropout = nn.Dropout(s.dropout)

    def forward(
        self,
        hidden: torch.Tensor,
        bias: torch.Tensor | None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> torch.Tensor:
        """Attend with the additive mask ``bias`` (``None``: plain causal).

        ``bias`` is ``[1 or B, 1 or nh, S, S]``, ALiBi included.

        The output is not yet dropped out: the block applies ``output_dropout`` (D).
        """
        batch, length, _ = hidden.shape
        q = self.proj_q_dense_layer(hidden).view(batch, length, self.heads, self.head_dim)
        k = self.proj_k_dense_layer(hidden).view(batch, length, self.groups, self.head_dim)
        v = self.proj_v_dense_layer(hidden).view(batch, length, self.groups, self.head_dim)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        if self.cap is None:  # query head h reads k/v group h // (heads / groups)
            attended = functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None if bias is None else bias.to(q.dtype),
                dropout_p=dropout, is_causal=bias is None, scale=self.scale,
                enable_gqa=self.groups != self.heads,
            )  # fmt: skip
        else:
            if bias is None:
                bias = causal_bias(length, hidden.device)
            if self.groups != self.heads:
                repeat = self.heads // self.groups
                k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
            scores = (q @ k.transpose(-1, -2)).float() * self.scale
            scores = self.cap * torch.tanh(scores / self.cap) + bias
            probabilities = torch.softmax(scores, dim=-1).to(v.dtype)
            probabilities = functional.dropout(probabilities, dropout, self.training)
            attended = probabilities @ v
        merged = attended.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        out: torch.Tensor = self.proj_output_dense_layer(merged)
        return out
