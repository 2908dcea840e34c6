"""Which :class:`.checkpointer.Checkpointer` a run uses (``checkpoint.format``).

``file`` (the default): one ``torch.save`` file per step; ``dcp``: a
``torch.distributed.checkpoint`` folder per step (:mod:`.dcp`,
imported only then).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from plugtrain.train.checkpointing.storage.checkpointer import Checkpointer
from plugtrain.train.checkpointing.storage.file import FileCheckpointer

if TYPE_CHECKING:
    import torch

    from plugtrain.config.sections import CheckpointSettings
    from plugtrain.contract.strategy import ParallelStrategy

__all__ = ["StoringTrainer", "checkpointer_for"]


class StoringTrainer(Protocol):
    """What choosing and building a checkpointer reads of the trainer."""

    @property
    def checkpoint(self) -> CheckpointSettings:
        """The checkpoint settings (``format``, ``checkpoint_name``, ``async_save``)."""

    @property
    def checkpoint_dir(self) -> Path:
        """Where the checkpoints are written."""

    @property
    def model_dir(self) -> Path:
        """The run folder whose record says which checkpoints are ours."""

    @property
    def strategy(self) -> ParallelStrategy:
        """Which process writes."""

    @property
    def unwrapped_model(self) -> torch.nn.Module:
        """The model whose state a DCP checkpoint loads into."""

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer whose state a DCP checkpoint loads into."""


def checkpointer_for(trainer: StoringTrainer) -> Checkpointer:
    """The checkpointer of ``trainer.checkpoint.format``: single files, or DCP folders."""
    settings = trainer.checkpoint
    if getattr(settings, "format", "file") != "dcp":
        return FileCheckpointer(
            trainer.checkpoint_dir, settings.checkpoint_name, owner=trainer.model_dir
        )
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer, state_template

    return DCPCheckpointer(
        trainer.checkpoint_dir,
        settings.checkpoint_name,
        lambda with_state: state_template(trainer, with_state),
        is_writer=bool(trainer.strategy.is_writer),
        async_save=bool(settings.async_save),
        owner=trainer.model_dir,
    )
