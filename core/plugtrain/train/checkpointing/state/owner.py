"""What :class:`~.trainer_state.TrainerState` needs of the trainer whose state it saves and loads.

A :class:`plugtrain.train.trainer.Trainer`, or a stand-in: the state reads the parts that make
a checkpoint and sets the few step and position records a save or a load changes. Being a
:class:`~plugtrain.protocols.TrainerView` too, it is what the callbacks' checkpoint hooks get.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from plugtrain.contract.protocols import TrainerView

if TYPE_CHECKING:
    import torch

    from plugtrain.config.sections import CheckpointSettings
    from plugtrain.contract.strategy import ParallelStrategy
    from plugtrain.registry.components import Registry
    from plugtrain.train.loop import Callbacks, NonFiniteGuard, Precision, Sparsity

__all__ = ["CheckpointStore", "StateOwner"]


class CheckpointStore(Protocol):
    """What the state asks of the trainer's checkpointer (where checkpoints are stored)."""

    @property
    def collective(self) -> bool:
        """Whether every process saves (each its shard); else the writing process alone."""

    @property
    def sharded(self) -> bool:
        """Whether the model and optimizer are saved and loaded as this process's shards."""

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Write the checkpoint of ``step``; its path."""

    def verify(self, path: Path, state: Mapping[str, Any], owners: Mapping[str, Any]) -> None:
        """Check once that the checkpoint written loads back as ``state``."""

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The state stored at ``path``."""

    def load_newest(self, restore: Callable[[Path], None]) -> Path | None:
        """Restore the newest sound checkpoint with ``restore``; its path (``None``: none)."""

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """``(step, path)`` of every checkpoint found, newest first."""

    def prune(self, keep: int, spare: Path | None = None) -> list[Path]:
        """Delete this run's checkpoints but the newest ``keep`` (and ``spare``); the removed."""


class StateOwner(TrainerView, Protocol):
    """The trainer a :class:`~.trainer_state.TrainerState` saves and restores.

    Besides what every callback reads, the parts that hold state (precision's grad scaler,
    the callbacks' dispatcher, sparsity, the non-finite guard), the checkpointer, the
    registry a Hugging Face checkpoint's converter is found in, and the records a save or a
    load sets (``global_step``, ``loaded_step``, ``saved_step``, ``last_good_checkpoint``,
    ``stream_position``).
    """

    global_step: int
    loaded_step: int | None
    saved_step: int
    last_good_checkpoint: Path | None
    stream_position: dict[str, Any] | None

    @property
    def strategy(self) -> ParallelStrategy:
        """Which process writes, and whether the parameters are sharded."""

    @property
    def checkpointer(self) -> CheckpointStore:
        """Writes, finds and reads the checkpoints."""

    @property
    def checkpoint(self) -> CheckpointSettings:
        """The checkpoint settings (strict loading, version check, autoload)."""

    @property
    def sparsity(self) -> Sparsity | None:
        """The model's weight sparsity, whose masks are part of the state."""

    @property
    def precision(self) -> Precision:
        """Autocast and loss scaling; the grad scaler is part of the state."""

    @property
    def callbacks_dispatch(self) -> Callbacks:
        """Calls the callbacks' checkpoint hooks and holds their states."""

    @property
    def nan_guard(self) -> NonFiniteGuard:
        """Refuses to save non-finite weights."""

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer (``None``: a trainer built to evaluate only)."""

    @property
    def schedulers(self) -> Sequence[Any]:
        """The schedulers, whose ``state_dict`` is part of the state."""

    @property
    def registry(self) -> Registry | None:
        """Where a Hugging Face checkpoint's converter is found (``None``: the process's)."""

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore the checkpoint at ``path`` (through this state, with the callbacks' hooks)."""

    def checkpoint_path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""
