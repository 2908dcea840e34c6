"""Checkpoints: the :class:`Checkpointer` interface, its formats, and what a checkpoint holds.

Two formats (``file``: one archive per step; ``dcp``: a sharded folder per step), the trainer's
state, and the rules around them: integrity, ownership, agreement between ranks, the model
directory's lock, and conversion between the formats.
"""

from __future__ import annotations

from plugtrain.train.checkpointing.archive import (
    find_checkpoints,
    find_latest,
    load_checkpoint,
    save_checkpoint,
)
from plugtrain.train.checkpointing.checkpointer import Checkpointer
from plugtrain.train.checkpointing.formats import checkpointer_for
from plugtrain.train.checkpointing.lock import run_locks
from plugtrain.train.checkpointing.state_rule import round_trip_problems
from plugtrain.train.checkpointing.trainer_state import TrainerState

__all__ = [
    "Checkpointer",
    "TrainerState",
    "checkpointer_for",
    "find_checkpoints",
    "find_latest",
    "load_checkpoint",
    "round_trip_problems",
    "run_locks",
    "save_checkpoint",
]
