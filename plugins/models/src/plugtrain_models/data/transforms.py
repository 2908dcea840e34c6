"""``data_transforms`` of the map processor, applied to each collated batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from plugtrain.errors import TrainingError
from plugtrain_models.data.schemas import TRANSFORMS

__all__ = ["add_sink_tokens", "compose"]

Batch = dict[str, torch.Tensor]


def add_sink_tokens(
    batch: Batch,
    *,
    sink_token_id: int = 0,
    num_sink_tokens: int = 1,
    sink_token_start_pos: int = 0,
    truncate_to_original_length: bool = False,
) -> Batch:
    """Insert ``num_sink_tokens`` copies of ``sink_token_id`` at ``sink_token_start_pos``.

    They go into ``input_ids`` and ``labels`` with loss mask 0 (``attention_mask``); other rows
    get zeros there. The sequence grows by that many tokens, unless truncated back.

    :raises TrainingError: ``sink_token_start_pos`` is beyond the sequence.
    """
    length = next(iter(batch.values())).shape[1]
    at = sink_token_start_pos
    if at > length:
        message = f"add_sink_tokens: sink_token_start_pos {at} is beyond the sequence ({length})"
        raise TrainingError(message)
    result = {}
    for name, rows in batch.items():
        fill = sink_token_id if name in ("input_ids", "labels") else 0
        sinks = torch.full((rows.shape[0], num_sink_tokens), fill, dtype=rows.dtype)
        grown = torch.cat([rows[:, :at], sinks, rows[:, at:]], dim=1)
        result[name] = grown[:, :length] if truncate_to_original_length else grown
    return result


_FUNCTIONS: dict[str, Callable[..., Batch]] = {"add_sink_tokens": add_sink_tokens}


def compose(transforms: Sequence[Mapping[str, Any]] | None) -> Callable[[Batch], Batch] | None:
    """One function applying the written ``data_transforms`` in order (``None``: none)."""
    if not transforms:
        return None
    steps = []
    for item in transforms:
        name = str(item["name"])
        keywords = {**TRANSFORMS[name], **{k: v for k, v in item.items() if k != "name"}}
        steps.append((_FUNCTIONS[name], keywords))
    return _Composed(steps)


class _Composed:
    """Picklable for DataLoader workers (a closure would not be)."""

    def __init__(self, steps: list[tuple[Callable[..., Batch], dict[str, Any]]]) -> None:
        self.steps = steps

    def __call__(self, batch: Batch) -> Batch:
        for function, keywords in self.steps:
            batch = function(batch, **keywords)
        return batch
