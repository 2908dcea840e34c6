"""The per-tensor transforms the decoder families' converters declare.

Each is an exact inverse pair (a round trip gives back the same bits) that keeps the dtype; torch
is imported only when one runs. They read the head counts from the model's keys, settled as the
decoder settles them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from plugtrain.conversion import ConversionContext
from plugtrain_models.settings import DecoderSettings, resolve_settings

__all__ = [
    "Chunks",
    "FusedHeads",
    "PlusOne",
    "RopeRows",
    "Transposed",
    "settings_of",
]


def settings_of(context: ConversionContext) -> DecoderSettings:
    """The decoder settings of the model being converted."""
    return resolve_settings(context.keys, parallel=False)


def _interleave(tensor: Any, heads: int, rotary: int) -> Any:
    """Each head's rotary rows from [first half | second half] to interleaved pairs.

    One copy: row ``2i`` of a head's rotary rows is its row ``i``, row ``2i + 1`` its row
    ``half + i`` (the halves read as pairs, transposed); the rows past them stay.
    """
    shaped = tensor.reshape(heads, -1, *tensor.shape[1:])
    rest = shaped.shape[2:]
    half = rotary // 2
    out = shaped.new_empty(shaped.shape)
    halves = shaped[:, :rotary].reshape(heads, 2, half, *rest)
    out[:, :rotary].view(heads, half, 2, *rest).copy_(halves.transpose(1, 2))
    if rotary < shaped.shape[1]:
        out[:, rotary:] = shaped[:, rotary:]
    return out.reshape(tensor.shape)


def _deinterleave(tensor: Any, heads: int, rotary: int) -> Any:
    shaped = tensor.reshape(heads, -1, *tensor.shape[1:])
    out = shaped.clone()
    half = rotary // 2
    out[:, :half] = shaped[:, 0:rotary:2]
    out[:, half:rotary] = shaped[:, 1:rotary:2]
    return out.reshape(tensor.shape)


@attrs.frozen
class RopeRows:
    """Hugging Face's rotate-half rotary rows to Model Zoo's interleaved pairs, per head.

    :param heads: ``"q"`` (the attention heads), ``"kv"`` (the key/value groups) or ``"one"``
        (a per-head vector such as a query/key norm's weight).
    """

    heads: str = "q"

    def _counts(self, context: ConversionContext) -> tuple[int, int]:
        s = settings_of(context)
        count = {"q": s.num_heads, "kv": s.num_kv_groups, "one": 1}[self.heads]
        return count, s.rotary_dim

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Interleave each head's rotary halves."""
        heads, rotary = self._counts(context)
        return [_interleave(t, heads, rotary) for t in tensors]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Split each head's rotary pairs back into halves."""
        heads, rotary = self._counts(context)
        return [_deinterleave(t, heads, rotary) for t in tensors]


@attrs.frozen
class Transposed:
    """A Conv1D weight ``[in, out]`` (GPT-2's) as a Linear's ``[out, in]``; vectors unchanged."""

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Transpose each 2-D tensor."""
        return [t.t().contiguous() if t.dim() == 2 else t for t in tensors]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Transpose each 2-D tensor back."""
        return self.to_plugtrain(tensors, context)


@attrs.frozen
class PlusOne:
    """Gemma's norms compute ``x * (1 + w)``: plugtrain holds ``1 + w``.

    Computed in float64 and rounded once, so a round trip is exact wherever ``w`` and ``1 + w``
    have the same precision (weights near 1, as trained norms are).
    """

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Add one."""
        return [(t.double() + 1.0).to(t.dtype) for t in tensors]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Subtract one."""
        return [(t.double() - 1.0).to(t.dtype) for t in tensors]


def _rows(settings: DecoderSettings) -> tuple[int, int]:
    """Rows of the query projection and of one key or value projection."""
    return settings.num_heads * settings.head_dim, settings.num_kv_groups * settings.head_dim


@attrs.frozen
class Chunks:
    """One fused ``[q; k; v]`` projection (rows in that order) as three.

    :param conv1d: the fused weight is GPT-2's Conv1D ``[in, out]`` (transposed first).
    """

    conv1d: bool = False

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Split the rows into q, k and v."""
        (fused,) = tensors
        if self.conv1d and fused.dim() == 2:
            fused = fused.t()
        q_rows, kv_rows = _rows(settings_of(context))
        parts = fused.split([q_rows, kv_rows, kv_rows], dim=0)
        return [p.contiguous() for p in parts]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Join q, k and v into one tensor."""
        import torch

        fused = torch.cat(list(tensors), dim=0)
        if self.conv1d and fused.dim() == 2:
            fused = fused.t().contiguous()
        return [fused]


@attrs.frozen
class FusedHeads:
    """A fused projection laid out per key/value group: ``[group][q heads..., k, v][head_dim]``.

    Bloom and GPT-NeoX (one query per group, so ``[head][q, k, v]``) and Falcon (several query
    heads share each k and v) store it this way. ``rope`` reorders the rotary rows of q and k.
    """

    rope: bool = False

    def _shape(self, context: ConversionContext) -> tuple[DecoderSettings, int]:
        s = settings_of(context)
        return s, s.num_heads // s.num_kv_groups

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Split the fused tensor into q, k and v."""
        (fused,) = tensors
        s, per_group = self._shape(context)
        rest = fused.shape[1:]
        shaped = fused.reshape(s.num_kv_groups, per_group + 2, s.head_dim, *rest)
        q = shaped[:, :per_group].reshape(-1, *rest)
        k = shaped[:, per_group].reshape(-1, *rest)
        v = shaped[:, per_group + 1].reshape(-1, *rest)
        if self.rope:
            q = _interleave(q, s.num_heads, s.rotary_dim)
            k = _interleave(k, s.num_kv_groups, s.rotary_dim)
        return [q.contiguous(), k.contiguous(), v.contiguous()]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Join q, k and v into the fused layout."""
        import torch

        q, k, v = tensors
        s, per_group = self._shape(context)
        if self.rope:
            q = _deinterleave(q, s.num_heads, s.rotary_dim)
            k = _deinterleave(k, s.num_kv_groups, s.rotary_dim)
        rest = q.shape[1:]
        groups = s.num_kv_groups
        parts = [
            q.reshape(groups, per_group, s.head_dim, *rest),
            k.reshape(groups, 1, s.head_dim, *rest),
            v.reshape(groups, 1, s.head_dim, *rest),
        ]
        return [torch.cat(parts, dim=1).reshape(-1, *rest).contiguous()]


@attrs.frozen
class WithAlibiSlopes:
    """A tensor and, beside it, ALiBi's fixed slopes ``[heads, 1]`` (BLOOM's embedding norm).

    Hugging Face BLOOM computes its slopes; plugtrain holds them as a parameter
    (``embedding_layer.position_embed_helper.slopes``). Import makes them as the model's
    construction does, in the tensor's dtype; export drops them once checked to be those values.
    """

    def _slopes(self, context: ConversionContext, dtype: Any) -> Any:
        import torch

        from plugtrain_models.layers import alibi_slopes

        heads = settings_of(context).num_heads
        return torch.tensor(alibi_slopes(heads)).unsqueeze(1).to(dtype)

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The tensor, then the slopes."""
        (tensor,) = tensors
        return [tensor, self._slopes(context, tensor.dtype)]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The tensor (the slopes must be ALiBi's: Hugging Face cannot hold trained ones)."""
        import torch

        from plugtrain.conversion import ConversionError

        tensor, slopes = tensors
        if not torch.equal(slopes, self._slopes(context, slopes.dtype)):
            message = (
                "embedding_layer.position_embed_helper.slopes are not ALiBi's fixed slopes; "
                "Hugging Face BLOOM computes its own and cannot hold trained ones"
            )
            raise ConversionError(message)
        return [tensor]
