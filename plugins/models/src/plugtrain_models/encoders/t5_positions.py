"""Positions of T5 and the transformer: T5's relative buckets and tensor2tensor's sinusoid.

- :class:`RelativePositionBias`: one table ``relative_attention_bias`` ``[buckets, heads]`` per
  stack; every layer of the stack adds the same ``[1, heads, S, S]`` bias to its scores.
- :class:`FixedPositionEmbedding`: tensor2tensor's timing signal (min timescale 1, max 1e4) with
  sin and cos *interleaved* per frequency, held in a frozen parameter ``fpe``, as Model Zoo.
- :class:`LearnedPositionEmbedding`: a learned table ``embed``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "FixedPositionEmbedding",
    "LearnedPositionEmbedding",
    "RelativePositionBias",
    "relative_position_bucket",
    "timing_signal",
]

MAX_DISTANCE = 128
"""Relative distances at or beyond it share the last bucket."""


def relative_position_bucket(
    relative: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """T5's bucket of each relative position ``key - query`` (long, in ``[0, num_buckets)``).

    Half the buckets (of each direction when ``bidirectional``) hold the exact distances below
    ``num_buckets / 2`` (per direction), the rest logarithmically wider bins up to
    ``max_distance``. Causal (not bidirectional) stacks bucket only keys at or before the query.
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    exact = num_buckets // 2
    is_small = distance < exact
    ratio = distance.float() / exact
    log_ratio = torch.log(ratio) / math.log(max_distance / exact)
    large = exact + (log_ratio * (num_buckets - exact)).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """One stack's relative attention bias (``relative_attention_bias``, ``[buckets, heads]``)."""

    def __init__(self, num_buckets: int, num_heads: int, *, bidirectional: bool) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.bidirectional = bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)

    def forward(self, query_length: int, key_length: int) -> torch.Tensor:
        """The bias ``[1, heads, query_length, key_length]`` added to every layer's scores."""
        device = self.relative_attention_bias.weight.device
        query = torch.arange(query_length, device=device)[:, None]
        key = torch.arange(key_length, device=device)[None, :]
        buckets = relative_position_bucket(
            key - query,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=MAX_DISTANCE,
        )
        # contiguous: a permuted bias would hand its layout to every layer's scores, and the
        # softmax over keys that are not adjacent in memory is several times slower
        table = self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)
        return table.contiguous()


def timing_signal(positions: int, width: int) -> torch.Tensor:
    """tensor2tensor's ``[positions, width]`` table, pairs interleaved.

    Row ``p`` is ``[sin(p w_0), cos(p w_0), sin(p w_1), cos(p w_1), ...]`` with
    ``w_j = exp(-j ln(1e4) / (width/2 - 1))``; an odd width gets a zero last column.
    """
    half = width // 2
    increment = math.log(1.0e4) / max(half - 1, 1)
    inverse = torch.exp(torch.arange(half, dtype=torch.float32) * -increment)
    angles = torch.arange(positions, dtype=torch.float32)[:, None] * inverse[None, :]
    table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(positions, 2 * half)
    return nn.functional.pad(table, (0, width % 2))


class FixedPositionEmbedding(nn.Module):
    """The frozen timing signal ``fpe`` ``[max_positions, d_model]`` (see :func:`timing_signal`)."""

    def __init__(self, positions: int, width: int) -> None:
        super().__init__()
        self.fpe = nn.Parameter(timing_signal(positions, width), requires_grad=False)

    def reset_parameters(self) -> None:
        """Recompute the table (the meta-device contract)."""
        with torch.no_grad():
            self.fpe.copy_(timing_signal(*self.fpe.shape))

    def forward(self, length: int) -> torch.Tensor:
        """The rows of positions ``0 .. length - 1``."""
        if length > self.fpe.shape[0]:
            message = f"sequence of {length} tokens, the position table has {self.fpe.shape[0]}"
            raise ValueError(message)
        return self.fpe[:length]


class LearnedPositionEmbedding(nn.Module):
    """A learned table ``embed`` ``[max_positions, d_model]``."""

    def __init__(self, positions: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(positions, width)

    def forward(self, length: int) -> torch.Tensor:
        """The rows of positions ``0 .. length - 1``."""
        if length > self.embed.num_embeddings:
            message = (
                f"sequence of {length} tokens, the position table has {self.embed.num_embeddings}"
            )
            raise ValueError(message)
        return self.embed.weight[:length]
