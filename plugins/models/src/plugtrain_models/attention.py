"""Causal self-attention with grouped k/v, RoPE, ALiBi, windows and softcapping.

Model Zoo's scores: ``s = alpha * (q c)(k c')^T [/ (layer+1)]``, softcap, ALiBi bias, mask,
softmax over keys (float32), dropout, ``@ v``, ``W_o``. Without softcapping the scores go
through :func:`torch.nn.functional.scaled_dot_product_attention` (its fused kernels; grouped
k/v read in place) with the same scale: plain causal attention as ``is_causal``, and ALiBi,
sliding windows, sinks, VSL spans and a cache's padding as one additive mask. Soft-capping
transforms the scores before the mask, which SDPA cannot express, so those are computed
explicitly. For generation, a :class:`LayerCache` keeps each layer's keys and values so that a
step computes only the new tokens.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.layers import apply_rotary, causal_bias
from plugtrain_models.settings import DecoderSettings

__all__ = ["Attention", "KVCache", "LayerCache"]


class LayerCache:
    """One layer's keys and values so far, ``[B, groups, capacity, d]`` each, filled from 0.

    :attr:`start` is the slot the next tokens go to (the model's cache sets it every step).
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values = keys, values
        self.start = 0

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new ``k``/``v`` (``[B, groups, S, d]``); return every key and value so far."""
        end = self.start + k.shape[2]
        self.keys[:, :, self.start : end] = k
        self.values[:, :, self.start : end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """Every layer's keys and values for incremental decoding, with each slot's row bookkeeping.

    Slots ``0 .. length - 1`` are filled. ``positions[b, i]`` is the position of the token in
    slot ``i`` of row ``b`` (rows of a batch count their own positions, so left padding does not
    shift them); ``valid[b, i]`` is false for padding, which no other token attends to.
    ``next_position[b]`` is where row ``b``'s next real token goes.
    """

    def __init__(
        self, settings: DecoderSettings, batch: int, capacity: int,
        dtype: torch.dtype, device: torch.device,
    ) -> None:  # fmt: skip
        shape = (batch, settings.num_kv_groups, capacity, settings.head_dim)

        def empty() -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.layers = [LayerCache(empty(), empty()) for _ in range(settings.num_layers)]
        self.capacity = capacity
        self.length = 0
        self.positions = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.next_position = torch.zeros(batch, dtype=torch.long, device=device)

    def append(self, mask: torch.Tensor) -> torch.Tensor:
        """Reserve slots for new tokens (``mask`` ``[B, S]``: 1 real, 0 padding); their positions.

        Padding gets the position of the row's next real token (it is never attended to).
        """
        count = mask.shape[1]
        if self.length + count > self.capacity:
            message = f"the cache holds {self.capacity} tokens; {self.length + count} asked for"
            raise ValueError(message)
        mask = mask.to(torch.long)
        positions = self.next_position.unsqueeze(1) + (mask.cumsum(1) - mask)
        end = self.length + count
        self.positions[:, self.length : end] = positions
        self.valid[:, self.length : end] = mask.bool()
        self.next_position = self.next_position + mask.sum(1)
        for layer in self.layers:
            layer.start = self.length
        self.length = end
        return positions


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
        rotary: torch.Tensor | None,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """Attend with the additive mask ``bias`` (``None``: plain causal).

        ``bias`` is ``[1 or B, 1 or nh, S, S]``, ALiBi included; with a ``cache``, the new
        queries attend to every cached key and ``bias`` is ``[B, 1 or nh, S, cached + S]``.
        ``rotary``: the positions' RoPE phases (:func:`~plugtrain_models.layers.rotary_phases`).

        The output is not yet dropped out: the block applies ``output_dropout`` (D).
        """
        batch, length, _ = hidden.shape
        q = self.proj_q_dense_layer(hidden).view(batch, length, self.heads, self.head_dim)
        k = self.proj_k_dense_layer(hidden).view(batch, length, self.groups, self.head_dim)
        v = self.proj_v_dense_layer(hidden).view(batch, length, self.groups, self.head_dim)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.extend(k, v)
        dropout = self.dropout if self.training else 0.0
        if self.cap is None:  # query head h reads k/v group h // (heads / groups)
            attended = functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None if bias is None else bias.to(q.dtype),
                dropout_p=dropout, is_causal=bias is None, scale=self.scale,
                enable_gqa=self.groups != self.heads,
            )  # fmt: skip
        else:
            mask = causal_bias(length, q.device) if bias is None else bias
            attended = self._capped(q, k, v, mask)
        merged = attended.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        out: torch.Tensor = self.proj_output_dense_layer(merged)
        return out

    def _capped(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        """Soft-capped attention: ``softmax(cap * tanh(scale * q k^T / cap) + bias) @ v``.

        Grouped k/v are not repeated: the ``heads / groups`` query heads of a group are stacked
        along the query axis, so that one matmul per group reads its k and v once. The chain
        runs in place where autograd allows (no step's backward needs what the next overwrites).
        """
        batch, heads, length, dim = q.shape
        stacked = q.reshape(batch, self.groups, -1, dim)  # heads of a group are adjacent
        # in place: a matmul's (or float copy's) output, tanh_ keeps the result it saves
        scores = (stacked @ k.transpose(-1, -2)).float().mul_(self.scale / self.cap).tanh_()
        # one pass (no in-place add on a view, whose backward zero-fills a scores-sized tensor)
        scores = torch.add(bias, scores.view(batch, heads, length, -1), alpha=self.cap)
        probabilities = torch.softmax(scores, dim=-1).to(v.dtype)
        dropout = self.dropout if self.training else 0.0
        probabilities = functional.dropout(probabilities, dropout, self.training)
        out = probabilities.view(batch, self.groups, -1, probabilities.shape[-1]) @ v
        return out.view(batch, heads, length, dim)
