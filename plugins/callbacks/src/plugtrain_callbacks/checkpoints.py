"""Checkpoint callbacks: how many to keep, and which parts of one to restore."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from plugtrain.schema import validated_arguments
from plugtrain_callbacks.schemas import (
    KeepNCheckpointsArgs,
    LoadCheckpointStatesArgs,
    checkpoint_states,
)

__all__ = ["KeepNCheckpoints", "LoadCheckpointStates"]

log = logging.getLogger("plugtrain")


class KeepNCheckpoints:
    """Deletes older checkpoints so that at most ``n`` of those this run saved remain.

    The checkpoint just saved (the newest sound one) is never deleted; the list of saved
    checkpoints is part of the callback's state, so a resumed fit goes on counting.
    Checkpoints in ``model_dir`` from before are left alone.

    :param n: how many to keep; ``None``: all.
    """

    def __init__(self, n: int | None = None) -> None:
        checked = validated_arguments(KeepNCheckpointsArgs, {"n": n}, owner="KeepNCheckpoints")
        self.n: int | None = checked["n"]
        self.saved: list[str] = []

    def on_save_checkpoint(self, trainer: Any, path: Path) -> None:
        """Record ``path`` and delete the oldest ones beyond ``n``."""
        name = str(path)
        if name in self.saved:
            self.saved.remove(name)
        self.saved.append(name)
        if self.n is None:
            return
        checkpointer = getattr(trainer, "checkpointer", None)
        while len(self.saved) > self.n:
            old = Path(self.saved.pop(0))
            if checkpointer is not None:
                checkpointer.remove(old)  # a file, or a DCP checkpoint's folder
            else:
                old.unlink(missing_ok=True)
            log.info("KeepNCheckpoints: deleted %s (keeping %d)", old, self.n)

    def on_load_checkpoint(self, trainer: Any, path: Path) -> None:
        """Count the checkpoint a fit resumes from as saved (its own state predates it)."""
        if str(path) not in self.saved:
            self.saved.append(str(path))

    def state_dict(self) -> dict[str, Any]:
        """The checkpoints saved so far."""
        return {"saved": list(self.saved)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from the saved list."""
        self.saved = [str(p) for p in state.get("saved", [])]


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

    def on_before_load_checkpoint(self, trainer: Any, state: dict[str, Any]) -> None:
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
