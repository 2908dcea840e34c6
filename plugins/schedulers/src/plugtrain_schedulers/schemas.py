"""Argument schemas of the schedulers (torch-free: ``plugtrain check`` imports only this)."""

from __future__ import annotations

from typing import Any

import attrs

from plugtrain.schema import arg


def _tags() -> Any:
    return arg(
        None,
        help="only update param groups carrying one of these tags (None: every group)",
    )


@attrs.frozen
class LinearLRArgs:
    """Linear interpolation of the learning rate from an initial to an end value.

    ``lr(e) = (a - b) * (1 - e / T) + b`` for ``e < T``, then ``b``.
    """

    initial_learning_rate: float = arg(help="learning rate at step 0", ge=0)
    end_learning_rate: float = arg(help="learning rate from step total_iters on", ge=0)
    total_iters: int = arg(help="number of steps of the ramp", gt=0)
    cycle: bool = arg(False, help="restart the ramp every total_iters steps (plugtrain fix)")
    param_group_tags: str | list[str | None] | None = _tags()
