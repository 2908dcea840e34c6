"""Attention masks for the shared blocks, as boolean tensors (``True``: the key is visible).

Every mask broadcasts against the scores ``[B, heads, queries, keys]``:
:func:`key_padding_mask` gives ``[B, 1, 1, S]``, :func:`vsl_mask` ``[B, 1, S, S]``,
:func:`causal_mask` ``[1, 1, T, T]``. Combine them with ``&``; :func:`additive_mask` turns one
into the additive form (0 visible, ``-inf`` hidden) when a bias must be added to it.
"""

from __future__ import annotations

import torch

__all__ = ["additive_mask", "causal_mask", "key_padding_mask", "vsl_mask"]


def key_padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, 1, 1, S]`` from a ``[B, S]`` mask: keys where ``attention_mask`` is non-zero."""
    return (attention_mask != 0)[:, None, None, :]


def vsl_mask(attention_span: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """``[B, 1, S, S]``: bidirectional attention within each packed sequence of a row.

    Model Zoo's ``create_vsl_mask(is_causal=False)``: key ``k`` is visible to query ``q`` iff
    ``q - k <= attention_span[k]`` (the key's tokens left in its sequence) and
    ``k - q <= position_ids[k]`` (the key's position in its sequence).

    :param attention_span: ``[B, S]``, per token the number of tokens after it in its sequence.
    :param position_ids: ``[B, S]``, per token its position in its sequence (restarting at 0).
    """
    length = attention_span.shape[1]
    steps = torch.arange(length, device=attention_span.device)
    diff = steps[:, None] - steps[None, :]  # [q, k] = q - k
    span = attention_span[:, None, :].to(diff.dtype)
    position = position_ids[:, None, :].to(diff.dtype)
    allowed = (diff[None] <= span) & (-diff[None] <= position)
    return allowed[:, None]


def causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """``[1, 1, T, T]``: query ``q`` sees keys ``0..q``."""
    steps = torch.arange(length, device=device)
    return (steps[None, :] <= steps[:, None])[None, None]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive form of a boolean ``mask``: 0 where visible, ``-inf`` where hidden."""
    zeros = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return zeros.masked_fill(~mask, float("-inf"))
