"""Checkpoint callbacks: how many to keep, and which parts of one to restore."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_callbacks.schemas import (
    KeepNCheckpointsArgs,
    LoadCheckpointStatesArgs,
    checkpoint_states,
)

__all__ = ["KeepNCheckpoints", "LoadCheckpointStates"]

log = logging.getLogger("plugtrain")


class KeepNCheckpoints:
    """Deletes older checkpoints so that at most ``n`` of those this run wrote remain.

    Which checkpoints the run wrote is the checkpointer's record in the checkpoint folder
    (:mod:`plugtrain.train.checkpointing.run_folder.ownership`), never a path from a loaded
    state: the checkpoint a fine-tuning run starts from (``ckpt_path``), another run's or a
    copied folder's checkpoints and checkpoints from before the record existed are left alone.
    The checkpoint just saved is never deleted.

    :param n: how many to keep; ``None``: all.
    """

    def __init__(self, n: int | None = None) -> None:
        checked = validated_arguments(KeepNCheckpointsArgs, {"n": n}, owner="KeepNCheckpoints")
        self.n: int | None = checked["n"]

    def on_save_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        """Delete the oldest checkpoints this run wrote beyond ``n``."""
        if self.n is None:
            return
        for old in trainer.checkpointer.prune(self.n, spare=Path(path)):
            log.info("KeepNCheckpoints: deleted %s (keeping %d)", old, self.n)

    def state_dict(self) -> dict[str, Any]:
        """Nothing to carry: the checkpoint folder's record says what was written."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Accept any saved state (older versions saved paths; they are not trusted)."""


class LoadCheckpointStates:
    """Restores only the named parts of a checkpoint; the others stay as this run built them.

    :param load_checkpoint_states: ``"all"``, or a list (or comma-separated string) of
        ``model``, ``optimizer``, ``schedulers`` (``lr_scheduler``), ``grad_scaler``,
        ``global_step``, ``dataloader``, ``sparsity`` (the algorithms' state; the masks are in
        ``model``). Callback states are restored only with ``all``.
    """

    def __init__(self, load_checkpoint_states: str | list[str] = "all") -> None:
        checked = validated_arguments(
            LoadCheckpointStatesArgs,
            {"load_checkpoint_states": load_checkpoint_states},
            owner="LoadCheckpointStates",
        )
        self.load_checkpoint_states = checkpoint_states(checked["load_checkpoint_states"])

    def on_before_load_checkpoint(self, trainer: TrainerView, state: dict[str, Any]) -> None:
        """Delete the parts not asked for."""
        wanted = self.load_checkpoint_states
        if wanted is None:
            return
        absent = sorted(wanted - set(state))
        if absent:
            log.warning("LoadCheckpointStates: the checkpoint has no %s to load", ", ".join(absent))
        skipped = sorted(set(state) - wanted)
        for key in skipped:
            del state[key]
        if skipped:
            log.info("LoadCheckpointStates: not loading %s", ", ".join(skipped))
