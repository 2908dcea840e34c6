"""``RampWD``: on plugtrain's scheduler base, which leaves the zero-decay groups alone."""

from __future__ import annotations

from acme_plugtrain_averaging.schemas import RampWDArgs
from plugtrain.scheduler import Scheduler

__all__ = ["RampWD"]


class RampWD(Scheduler):
    """Writes the ramp into the ``weight_decay`` of the groups ``param_group_tags`` selects."""

    schema = RampWDArgs
