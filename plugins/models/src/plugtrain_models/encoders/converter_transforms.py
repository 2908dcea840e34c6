"""Per-tensor transforms of the BERT-family converters (torch is imported when they run).

:class:`RotaryPairs` reorders ESM's q/k rows from rotate-half to interleaved pairs;
:class:`RobertaPositions` folds RoBERTa's constant segment row and padding offset into the
position table; :class:`WithZeros` drops Hugging Face tensors plugtrain has no use for and
writes zeros for them on export (ESM's contact head).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from plugtrain.conversion import ConversionContext

__all__ = ["RobertaPositions", "RotaryPairs", "WithZeros"]


class RotaryPairs:
    """q or k of every head: HF's row i and i + d/2 become Model Zoo's rows 2i and 2i + 1."""

    @staticmethod
    def _heads(context: ConversionContext) -> int:
        return int(context.keys["num_heads"])

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Interleave each head's two halves."""
        (tensor,) = tensors
        shaped = tensor.reshape(self._heads(context), -1, *tensor.shape[1:])
        half = shaped.shape[1] // 2
        import torch

        paired = torch.stack((shaped[:, :half], shaped[:, half:]), dim=2)
        return [paired.reshape(tensor.shape).contiguous()]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Split each head's pairs back into halves."""
        (tensor,) = tensors
        heads = self._heads(context)
        shaped = tensor.reshape(heads, -1, 2, *tensor.shape[1:])
        halves = shaped.transpose(1, 2)
        return [halves.reshape(tensor.shape).contiguous()]


class RobertaPositions:
    """HF's position table and single segment row as Model Zoo's padding-aware table.

    Model Zoo's row r is HF's row ``r + pad_token_id`` plus the segment row (HF adds it to every
    token); export writes ``pad_token_id`` zero rows first and a zero segment row.
    """

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Drop the rows below the padding id, add the segment row."""
        positions, segment = tensors
        pad = int(context.keys["pad_token_id"])
        return [(positions[pad:] + segment[0]).contiguous()]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """Zero rows before the table, and a zero segment row."""
        import torch

        (table,) = tensors
        pad = int(context.keys["pad_token_id"])
        zeros = table.new_zeros((pad, table.shape[1]))
        return [torch.cat((zeros, table)), table.new_zeros((1, table.shape[1]))]


class WithZeros:
    """The first HF tensor is plugtrain's; the others are dropped, and written as zeros.

    :param shapes: the shapes of the other tensors from the model keys.
    """

    def __init__(self, shapes: Callable[[Mapping[str, Any]], Sequence[tuple[int, ...]]]) -> None:
        self.shapes = shapes

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The first tensor."""
        return [tensors[0]]

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The tensor, then zeros of each shape."""
        (tensor,) = tensors
        return [tensor, *(tensor.new_zeros(shape) for shape in self.shapes(context.keys))]
