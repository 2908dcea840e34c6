"""Which :class:`.checkpointer.Checkpointer` a run uses (``checkpoint.format``).

``file`` (the default): one ``torch.save`` file per step; ``dcp``: a
``torch.distributed.checkpoint`` folder per step (:mod:`.dcp`,
imported only then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain.train.checkpointing.checkpointer import Checkpointer
from plugtrain.train.checkpointing.file import FileCheckpointer

if TYPE_CHECKING:
    from plugtrain.train.trainer import Trainer

__all__ = ["checkpointer_for"]


def checkpointer_for(trainer: Trainer) -> Checkpointer:
    """The checkpointer of ``trainer.checkpoint.format``: single files, or DCP folders."""
    settings = trainer.checkpoint
    if getattr(settings, "format", "file") != "dcp":
        return FileCheckpointer(
            trainer.checkpoint_dir, settings.checkpoint_name, owner=trainer.model_dir
        )
    from plugtrain.train.checkpointing.dcp import DCPCheckpointer, state_template

    return DCPCheckpointer(
        trainer.checkpoint_dir,
        settings.checkpoint_name,
        lambda with_state: state_template(trainer, with_state),
        is_writer=bool(trainer.strategy.is_writer),
        async_save=bool(settings.async_save),
        owner=trainer.model_dir,
    )
