"""The argument schemas; torch-free, so listing, checking and plotting never import torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.curve import Curve
from plugtrain.scheduler import ChildCurve, ScheduleSchema, tags_arg
from plugtrain.schema import arg

__all__ = ["HalvingLRArgs", "LinearWarmupLRArgs", "linear_warmup"]


def linear_warmup(peak: float, warmup_steps: int, start_factor: float) -> Curve:
    """``peak * (s + (1 - s) * min(e, W) / W)``: from ``s * peak`` up to ``peak``, then held."""

    def at(step: int) -> float:
        return peak * (start_factor + (1.0 - start_factor) * min(step, warmup_steps) / warmup_steps)

    return Curve(at, length=warmup_steps)


@attrs.frozen
class LinearWarmupLRArgs(ScheduleSchema):
    """Linear warmup: ``lr(e) = peak * (s + (1 - s) * min(e, W) / W)``, held at peak after W."""

    peak_learning_rate: float = arg(help="learning rate reached at warmup_steps", ge=0)
    warmup_steps: int = arg(help="steps of the ramp (its length inside a SequentialLR)", gt=0)
    start_factor: float = arg(0.0, help="fraction of the peak at step 0", ge=0, le=1)
    param_group_tags: str | list[str | None] | set[str | None] | None = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """The closed form, for ``plugtrain plot`` and for wrappers."""
        return linear_warmup(
            arguments["peak_learning_rate"], arguments["warmup_steps"], arguments["start_factor"]
        )


@attrs.frozen
class HalvingLRArgs:
    """Multiplies the learning rate of every group by ``factor`` every ``every`` steps.

    A torch-style scheduler (it reads each group's current value): it has no closed form, so
    ``plugtrain plot`` steps it and wrappers step it.
    """

    every: int = arg(help="steps between two reductions", gt=0)
    factor: float = arg(0.5, help="factor applied at each reduction", gt=0, le=1)
