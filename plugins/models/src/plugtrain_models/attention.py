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
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from plugtrain_models.layers import apply_rotary, causal_bias
from plugtrain_models.settings import DecoderSettings

__all__ = ["Attention", "KVCache", "LayerCache"]

_JOINED_TOKENS = 64
"""Tokens from which the q, k and v projections run as one matmul (:meth:`Attention._project`)."""


def _plain(layer: nn.Module) -> bool:
    """Whether ``layer`` is an ``nn.Linear`` that nothing hooks."""
    return type(layer) is nn.Linear and not (layer._forward_hooks or layer._forward_pre_hooks)


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

    Allocated once for ``capacity`` tokens per row; each call writes its slots in place. Slots
    ``0 .. length - 1`` are filled. While no row has padding (:attr:`padded` false) slot ``i``
    holds position ``i`` in every row and no per-slot tensor is kept up to date. Once a row is
    padded: ``positions[b, i]`` is the position of the token in slot ``i`` of row ``b`` (rows
    count their own positions, so left padding does not shift them); ``valid[b, i]`` is false
    for padding, which no other token attends to, and :attr:`padding_bias` ``[B, 1, 1,
    capacity]`` is ``-inf`` there (0 elsewhere); ``next_position[b]`` is where row ``b``'s next
    real token goes. :attr:`longest` is the largest next position of any row (a Python int).
    """

    def __init__(
        self, settings: DecoderSettings, batch: int, capacity: int,
        dtype: torch.dtype, device: torch.device,
    ) -> None:  # fmt: skip
        shape = (batch, settings.num_kv_groups, capacity, settings.head_dim)

        def pair() -> LayerCache:  # keys, then values, in one block: a step writes both at once
            both = torch.zeros((2, *shape), dtype=dtype, device=device)
            return LayerCache(both[0], both[1])

        self.layers = [pair() for _ in range(settings.num_layers)]
        self.batch, self.capacity, self.device = batch, capacity, device
        self.length = 0
        self.longest = 0
        self.padded = False
        self.positions = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        self.valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        self.padding_bias = torch.zeros(batch, 1, 1, capacity, device=device)
        self.next_position = torch.zeros(batch, dtype=torch.long, device=device)
        self.rotary: torch.Tensor | None = None
        """The RoPE phases of positions ``0 .. capacity - 1``, when the model uses RoPE."""
        self.plans: list[Any] = []
        """What the model prepares for its single-token steps (once per cache)."""
        self._slots = torch.arange(capacity, device=device)

    def _start_padding(self) -> None:
        """Write the per-slot bookkeeping of the slots filled so far (none of them padding)."""
        self.positions[:, : self.length] = self._slots[: self.length]
        self.valid[:, : self.length] = True
        self.next_position.fill_(self.length)
        self.padded = True

    def append(self, count: int, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Reserve ``count`` slots for new tokens (``mask`` ``[B, S]``: 1 real, 0 padding).

        Returns their positions: ``[S]``, shared by every row, while no row is padded, else
        ``[B, S]``. Padding gets the position of the row's next real token (it is never
        attended to).
        """
        end = self.length + count
        if end > self.capacity:
            message = f"the cache holds {self.capacity} tokens; {end} asked for"
            raise ValueError(message)
        if mask is not None and not self.padded and not bool(mask.all()):
            self._start_padding()
        start = self.length
        for layer in self.layers:
            layer.start = start
        self.length = end
        if not self.padded:
            self.longest = end
            return self._slots[start:end]
        if mask is None:
            positions = self.next_position.unsqueeze(1) + self._slots[:count]
            self.next_position += count
            self.longest += count
        else:
            mask = mask.to(torch.long)
            positions = self.next_position.unsqueeze(1) + (mask.cumsum(1) - mask)
            self.next_position += mask.sum(1)
            self.longest = int(self.next_position.max())
            self.padding_bias[:, 0, 0, start:end].masked_fill_(mask == 0, float("-inf"))
        self.positions[:, start:end] = positions
        self.valid[:, start:end] = True if mask is None else mask.bool()
        return positions

    def slot_positions(self) -> torch.Tensor:
        """``[B, length]``: the position of every filled slot of every row."""
        if self.padded:
            return self.positions[:, : self.length]
        return self._slots[: self.length].unsqueeze(0).expand(self.batch, -1)

    def slot_valid(self) -> torch.Tensor:
        """``[B, length]``: false where a filled slot holds padding."""
        if self.padded:
            return self.valid[:, : self.length]
        return torch.ones(self.batch, self.length, dtype=torch.bool, device=self.device)


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
        q, k, v = self._project(hidden)
        q = q.view(batch, length, self.heads, self.head_dim)
        k = k.view(batch, length, self.groups, self.head_dim)
        v = v.view(batch, length, self.groups, self.head_dim)
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

    def _project(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``q``, ``k`` and ``v`` ``[B, S, width]``: one matmul of the three weights joined.

        One matmul each way (and one input gradient instead of three summed) is cheaper than
        three narrower ones, and the joined weight is a copy of the weights alone; for a few
        tokens (a decoding step) that copy is not worth it, nor for projections something
        replaces or hooks (LoRA), whose own forward must run.
        """
        layers = (self.proj_q_dense_layer, self.proj_k_dense_layer, self.proj_v_dense_layer)
        if hidden.shape[:-1].numel() < _JOINED_TOKENS or not all(map(_plain, layers)):
            return tuple(layer(hidden) for layer in layers)
        weight = torch.cat([layer.weight for layer in layers])
        biases = [layer.bias for layer in layers]
        bias = None if biases[0] is None else torch.cat(biases)  # type: ignore[arg-type]
        joined = functional.linear(hidden, weight, bias)
        parts: tuple[torch.Tensor, ...] = joined.split([layer.out_features for layer in layers], -1)
        return parts

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
