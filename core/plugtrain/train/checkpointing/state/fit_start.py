"""Which checkpoint a fit starts from: a starting point begins a run, its own checkpoints resume it.

The rule, for ``Trainer.fit(ckpt_path=...)``:

- unset: the newest sound checkpoint of the checkpoint folder (when ``autoload_last_checkpoint``);
- a run checkpoint (a file the checkpoint folder lists) is loaded as named: it wins, as in
  Model Zoo;
- any other path is the run's starting point (a Hugging Face folder, a weights-only checkpoint,
  another folder's checkpoint): it begins the run; once the checkpoint folder holds checkpoints
  this run wrote after starting there, the same command resumes from the newest of them and says
  so. Every checkpoint records the starting point of its run (``metadata.started_from``, a
  resolved path, ``None`` for none), which tells this run's checkpoints from another run's;
- ``None``: the model's own initial weights.

A run never writes over checkpoints of later steps than it starts at that it did not load (a
finished run's, or those ``None`` ignores): the fit is refused, naming them. Naming one of the
folder's own checkpoints with its step (a rewind) is allowed, as in Model Zoo.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from plugtrain._unset import UNSET
from plugtrain.errors import CheckpointError

if TYPE_CHECKING:
    from plugtrain.train.checkpointing.state.owner import StateOwner

__all__ = ["STARTED_FROM", "restore_for_fit", "started_from_key"]

log = logging.getLogger("plugtrain")

STARTED_FROM = "started_from"
"""The metadata key of a checkpoint that names its run's starting point."""

_UNKNOWN = object()


class FitStartState(Protocol):
    """What the rule needs of the trainer's checkpoint state (``TrainerState`` is one)."""

    trainer: StateOwner
    started_from: str | None
    loaded_metadata: dict[str, Any]

    def restore(self, ckpt_path: Any) -> Path | None:
        """Load ``ckpt_path``, or (unset) the newest sound checkpoint; the path loaded."""


def started_from_key(ckpt_path: str | os.PathLike[str] | None) -> str | None:
    """How a starting point is recorded and compared: its resolved path (``None``: none)."""
    return None if ckpt_path is None else os.path.realpath(os.fspath(ckpt_path))


def restore_for_fit(state: FitStartState, ckpt_path: Any) -> Path | None:
    """Load what a fit starts from (see the module's rule); the path loaded, if any.

    :raises CheckpointError: the checkpoint folder holds checkpoints this run would write over.
    """
    trainer = state.trainer
    found = trainer.checkpointer.list_checkpoints()
    if ckpt_path is UNSET:
        loaded = state.restore(UNSET)
        if loaded is None:
            _refuse_overwrite(state, found, "no checkpoint of the folder was loaded")
        else:
            state.started_from = state.loaded_metadata.get(STARTED_FROM, None)
        return loaded
    if ckpt_path is None:
        state.started_from = None
        _refuse_overwrite(state, found, "ckpt_path: null starts from the model's own weights")
        return None
    given = Path(ckpt_path)
    if _is_listed(given, found):
        loaded = state.restore(given)
        state.started_from = state.loaded_metadata.get(STARTED_FROM, None)
        if trainer.global_step == 0:
            _refuse_overwrite(state, found, f"{given.name} was loaded without its step")
        return loaded
    key = started_from_key(given)
    theirs = _started_from(state, found[0][1]) if found else _UNKNOWN
    if found and trainer.checkpoint.autoload_last_checkpoint and theirs == key:
        resumed = state.restore(UNSET)
        if resumed is not None:
            log.info(
                "resuming from %s: model_dir holds checkpoints of this run, which started from "
                "%s (name a checkpoint in trainer.fit.ckpt_path to start from another)",
                resumed,
                given,
            )
            state.started_from = key
            return resumed
    trainer.load_checkpoint(given)
    state.started_from = key
    started = (
        "no checkpoint" if theirs is None else "an unknown point" if theirs is _UNKNOWN else theirs
    )
    why = f"from {given}; they are another run's, which started from {started}"
    _refuse_overwrite(state, found, why)
    return given


def _started_from(state: FitStartState, path: Path) -> object:
    """The starting point a checkpoint records (``_UNKNOWN``: it records none, or is unreadable)."""
    try:
        stored = state.trainer.checkpointer.load(path)
    except Exception:  # noqa: BLE001 - a damaged checkpoint is skipped by the resume itself
        return _UNKNOWN
    metadata = stored.get("metadata")
    if not isinstance(metadata, dict):
        return _UNKNOWN
    return metadata.get(STARTED_FROM, _UNKNOWN)


def _is_listed(path: Path, found: list[tuple[int, Path]]) -> bool:
    """Whether ``path`` is one of the checkpoint folder's own checkpoints."""
    real = os.path.realpath(path)
    return any(os.path.realpath(listed) == real for _, listed in found)


def _refuse_overwrite(state: FitStartState, found: list[tuple[int, Path]], why: str) -> None:
    """Refuse a run that would write over checkpoints of later steps than it starts at."""
    step = state.trainer.global_step
    later = [path for saved, path in found if saved > step]
    if not later:
        return
    names = ", ".join(path.name for path in later[:3]) + (" ..." if len(later) > 3 else "")
    message = (
        f"{later[0].parent} holds checkpoints ({names}) that this run, starting at step {step} "
        f"({why}), ignores and would write over: to resume, name the newest in "
        f"--set trainer.fit.ckpt_path={later[0]} (or leave ckpt_path out); to start anew, "
        "give another model_dir (or checkpoint_root), or remove them"
    )
    raise CheckpointError(message)
