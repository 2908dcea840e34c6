"""Checkpoints, in four rooms by job.

- :mod:`.storage`: the :class:`Checkpointer` interface and its two formats (``file``: one
  archive per step; ``dcp``: a sharded folder per step), and the relayout between them;
- :mod:`.state`: what a checkpoint holds (the trainer's state) and the rules a restored state
  meets (it loads with ``weights_only=True``, it fits the run);
- :mod:`.run_folder`: the model directory's lock, disk room, and which checkpoints are ours;
- :mod:`.ranks`: agreement between ranks on the checkpoint to resume from.

From the ground up: ``run_folder`` and ``ranks``, then ``state``, then ``storage``. The rooms
import each other only through their ``__init__.py``; the other rooms of ``plugtrain.train``
import from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugtrain.train.checkpointing.run_folder import run_locks
from plugtrain.train.checkpointing.state import TrainerState, round_trip_problems
from plugtrain.train.checkpointing.storage import (
    Checkpointer,
    checkpointer_for,
    find_checkpoints,
    find_latest,
    load_checkpoint,
    save_checkpoint,
)

if TYPE_CHECKING:
    from plugtrain.train.checkpointing.storage import export_weights, relayout_checkpoint

__all__ = [
    "Checkpointer",
    "TrainerState",
    "checkpointer_for",
    "export_weights",
    "find_checkpoints",
    "find_latest",
    "load_checkpoint",
    "relayout_checkpoint",
    "round_trip_problems",
    "run_locks",
    "save_checkpoint",
]


def __getattr__(name: str) -> Any:
    if name in (
        "export_weights",
        "relayout_checkpoint",
    ):  # they import torch.distributed.checkpoint
        from plugtrain.train.checkpointing import storage

        return getattr(storage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
