"""The run folder: one fit per model directory (its lock), room on the disk, and ownership.

- :mod:`.lock`: the model directory's lock, held by the main process through a fit;
- :mod:`.disk`: room reserved before work starts, and new hidden temporaries;
- :mod:`.ownership`: the record of which checkpoints in a folder this run wrote (pruning
  removes only those).
"""

from __future__ import annotations

from plugtrain.train.checkpointing.run_folder.disk import create_temporary, reserve
from plugtrain.train.checkpointing.run_folder.lock import LOCK_NAME, ModelDirLock, run_locks
from plugtrain.train.checkpointing.run_folder.ownership import (
    RECORD_NAME,
    CheckpointRootOwnedError,
    Ownership,
)

__all__ = [
    "LOCK_NAME",
    "RECORD_NAME",
    "CheckpointRootOwnedError",
    "ModelDirLock",
    "Ownership",
    "create_temporary",
    "reserve",
    "run_locks",
]
