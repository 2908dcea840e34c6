"""Where checkpoints are stored: the :class:`Checkpointer` interface and its formats.

- :mod:`.checkpointer`: the interface (save, list, load, prune, verify);
- :mod:`.file` (one archive per step, :mod:`.archive`) and :mod:`.dcp` (a sharded folder per
  step, with :mod:`.staging` and :mod:`.direct_io`); :mod:`.formats` picks one for a Trainer;
- :mod:`.relayout`: a single-file checkpoint into a DCP folder or back, and the weights alone.

The DCP modules import ``torch.distributed.checkpoint``; they load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plugtrain.train.checkpointing.storage.archive import (
    checkpoint_step,
    find_checkpoints,
    find_latest,
    load_checkpoint,
    save_checkpoint,
)
from plugtrain.train.checkpointing.storage.checkpointer import Checkpointer
from plugtrain.train.checkpointing.storage.file import FileCheckpointer
from plugtrain.train.checkpointing.storage.formats import checkpointer_for

if TYPE_CHECKING:
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer
    from plugtrain.train.checkpointing.storage.relayout import (
        export_weights,
        relayout_checkpoint,
    )

__all__ = [
    "Checkpointer",
    "DCPCheckpointer",
    "FileCheckpointer",
    "checkpoint_step",
    "checkpointer_for",
    "export_weights",
    "find_checkpoints",
    "find_latest",
    "load_checkpoint",
    "relayout_checkpoint",
    "save_checkpoint",
]

_LAZY = {
    "DCPCheckpointer": "dcp",
    "export_weights": "relayout",
    "relayout_checkpoint": "relayout",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module = import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
