"""``LinearWarmupLR``: the core's scheduler base does the rest (tags, state, signature)."""

from __future__ import annotations

from acme_plugtrain_warmup.schemas import LinearWarmupLRArgs
from plugtrain.scheduler import Scheduler

__all__ = ["LinearWarmupLR"]


class LinearWarmupLR(Scheduler):
    """Ramps the learning rate linearly up to ``peak_learning_rate`` over ``warmup_steps``."""

    schema = LinearWarmupLRArgs
