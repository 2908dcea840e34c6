"""The argument schema of WSD; torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.scheduler import ChildCurve, ScheduleSchema, tags_arg
from plugtrain.schema import arg


class WSDCurve:
    """Warmup, stable, decay: a callable of the step with a ``length`` (as 1.0 allowed)."""

    def __init__(self, peak: float, warmup: int, stable: int, decay: int) -> None:
        self.peak, self.warmup, self.stable, self.decay = peak, warmup, stable, decay
        self.length = warmup + stable + decay

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        if step < self.warmup + self.stable:
            return self.peak
        done = min(step - self.warmup - self.stable, self.decay)
        return self.peak * (1 - done / self.decay)


@attrs.frozen
class WSDArgs(ScheduleSchema):
    """Warmup-stable-decay learning rate."""

    peak_learning_rate: float = arg(help="learning rate of the stable phase", ge=0)
    warmup_steps: int = arg(help="steps of the linear warmup", gt=0)
    stable_steps: int = arg(help="steps at the peak", ge=0)
    decay_steps: int = arg(help="steps of the linear decay to 0", gt=0)
    param_group_tags: Any = tags_arg()

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Any:
        """The closed form (a callable of the step)."""
        return WSDCurve(
            arguments["peak_learning_rate"],
            arguments["warmup_steps"],
            arguments["stable_steps"],
            arguments["decay_steps"],
        )
