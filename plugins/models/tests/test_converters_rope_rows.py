"""The rotary rows' reordering of the converters: each head's halves to interleaved pairs."""

from __future__ import annotations

import pytest
import torch

from plugtrain_models.converters.transforms import _deinterleave, _interleave


def _reference(tensor: torch.Tensor, heads: int, rotary: int) -> torch.Tensor:
    """Row by row: a head's row ``2i`` is its row ``i``, row ``2i + 1`` its row ``half + i``."""
    rows = tensor.shape[0] // heads
    order = []
    for head in range(heads):
        first = head * rows
        for i in range(rotary // 2):
            order += [first + i, first + rotary // 2 + i]
        order += range(first + rotary, first + rows)
    return tensor[order]


@pytest.mark.parametrize(
    ("shape", "heads", "rotary"),
    [((32, 5), 4, 8), ((32, 5), 4, 4), ((32,), 4, 8), ((12,), 1, 6), ((24, 3), 2, 2)],
    ids=["whole-heads", "partial-rotary", "bias", "one-head", "two-rows"],
)
def test_rope_rows_interleave_each_head_and_come_back(
    shape: tuple[int, ...], heads: int, rotary: int
) -> None:
    tensor = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    tensor = tensor.to(torch.bfloat16)  # the converters read bfloat16 folders
    interleaved = _interleave(tensor, heads, rotary)
    assert interleaved.dtype == torch.bfloat16
    assert interleaved.is_contiguous()
    assert torch.equal(interleaved, _reference(tensor, heads, rotary))
    assert torch.equal(_deinterleave(interleaved, heads, rotary), tensor)
