"""The WSD scheduler, on plugtrain's scheduler base."""

from __future__ import annotations

from acme_plugtrain_wsd.schemas import WSDArgs
from plugtrain.scheduler import Scheduler


class WSD(Scheduler):
    """Writes the WSD curve into the selected param groups."""

    schema = WSDArgs
