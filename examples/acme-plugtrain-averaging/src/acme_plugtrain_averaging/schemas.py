"""The argument schemas; torch-free, so listing and checking never import torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.curve import Curve
from plugtrain.scheduler import ChildCurve, ScheduleSchema, tags_arg
from plugtrain.schema import arg

__all__ = ["RampWDArgs", "ScheduleFreeSGDArgs", "WeightEMAArgs"]


@attrs.frozen
class ScheduleFreeSGDArgs:
    """Schedule-Free SGD: trains at y, evaluates the average x (no learning-rate schedule)."""

    lr: float = arg(help="learning rate", gt=0)
    momentum: float = arg(0.9, help="interpolation between x and z", gt=0, lt=1)
    weight_decay: float = arg(0.0, help="L2 penalty, computed at y", ge=0)


@attrs.frozen
class WeightEMAArgs:
    """An exponential moving average of the weights, evaluated instead of the weights."""

    decay: float = arg(0.99, help="weight of the old average at each optimizer step", ge=0, lt=1)


@attrs.frozen
class RampWDArgs(ScheduleSchema):
    """A linear ramp of the weight decay from ``initial_weight_decay`` to ``end_weight_decay``."""

    schedule_key: ClassVar[str] = "weight_decay"

    initial_weight_decay: float = arg(help="weight decay at step 0", ge=0)
    end_weight_decay: float = arg(0.0, help="weight decay from total_iters on", ge=0)
    total_iters: int = arg(help="steps of the ramp", gt=0)
    param_group_tags: str | list[str | None] | set[str | None] | None = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """The closed form."""
        start, end = arguments["initial_weight_decay"], arguments["end_weight_decay"]
        steps = arguments["total_iters"]
        return Curve(lambda e: start + (end - start) * min(e, steps) / steps, length=steps)
