"""Several processes: stops agreed on every rank, sharded (DTensor) state."""

from __future__ import annotations

from plugtrain.train.distributed.dtensor_state import (
    gathered,
    local_tensor,
    model_shards,
    optimizer_shards,
)
from plugtrain.train.distributed.presharded import refuse_presharded_model
from plugtrain.train.distributed.signals import (
    InterruptRequest,
    StoppedAtOnce,
    TrainingInterrupted,
    also_stop_on,
    signal_name,
)

__all__ = [
    "InterruptRequest",
    "StoppedAtOnce",
    "TrainingInterrupted",
    "also_stop_on",
    "gathered",
    "local_tensor",
    "model_shards",
    "optimizer_shards",
    "refuse_presharded_model",
    "signal_name",
]
