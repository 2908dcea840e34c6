"""Where checkpoints live: the :class:`Checkpointer` interface and the single-file format.

The Trainer composes the state (:mod:`plugtrain.train.trainer_state`); a checkpointer writes
it, lists what was written, verifies it, reads it back, prunes old ones and, when resuming,
falls back from a damaged newest checkpoint to an older sound one. A sharded format (one
folder per step) is a second implementation of the same interface; the loop does not change.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from plugtrain.errors import CorruptCheckpointError
from plugtrain.train import checkpoint as single_file
from plugtrain.train.state_check import verify_first_checkpoint

__all__ = ["Checkpointer", "FileCheckpointer"]

log = logging.getLogger("plugtrain")


class Checkpointer(abc.ABC):
    """Saves, lists, verifies, loads and prunes the checkpoints of one run.

    :param directory: where the checkpoints are written and found.
    :param name: the file (or folder) name pattern, with ``{step}``.
    """

    collective = False
    """Whether every process calls :meth:`save` (each writes its shard); else the writer only."""

    sharded = False
    """Whether :meth:`save` takes the model and optimizer as this process's shards (DTensors)
    and :meth:`load` returns them so; else they are full tensors (gathered under FSDP2)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = Path(directory)
        self.name = name

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""
        return self.directory / self.name.format(step=step)

    def step_of(self, path: str | Path) -> int | None:
        """The step of a checkpoint named after :attr:`name`, else ``None``."""
        return single_file.checkpoint_step(Path(path).name, self.name)

    @abc.abstractmethod
    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Write ``state`` as the checkpoint of ``step``, atomically; returns its path."""

    @abc.abstractmethod
    def verify(self, path: Path, state: Mapping[str, Any], owners: Mapping[str, Any]) -> None:
        """Check that the checkpoint just written at ``path`` loads back as it must.

        :param owners: the object behind each part of ``state``, named in an error.
        :raises CheckpointError: naming what does not load; the checkpoint is removed.
        """

    @abc.abstractmethod
    def load(self, path: str | Path) -> dict[str, Any]:
        """The state stored at ``path``.

        :raises CorruptCheckpointError: the checkpoint is damaged.
        :raises CheckpointError: it cannot be read.
        """

    @abc.abstractmethod
    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """``(step, path)`` of every checkpoint in :attr:`directory`, the newest first."""

    @abc.abstractmethod
    def remove(self, path: Path) -> None:
        """Delete one checkpoint."""

    @abc.abstractmethod
    def clean_up(self) -> list[Path]:
        """Remove what interrupted saves left behind; returns it. Only under the run's lock."""

    def wait(self) -> None:  # noqa: B027 - a default, not an abstract method
        """Wait until a save running in the background is complete (here: none runs)."""

    def newest(self) -> Path | None:
        """The checkpoint with the highest step, or ``None``."""
        found = self.list_checkpoints()
        return found[0][1] if found else None

    def prune(self, keep: int) -> list[Path]:
        """Delete all but the ``keep`` newest checkpoints; returns the deleted paths."""
        removed = [path for _, path in self.list_checkpoints()[keep:]]
        for path in removed:
            self.remove(path)
        return removed

    def load_newest(self, restore: Callable[[Path], None]) -> Path | None:
        """Restore the newest sound checkpoint, falling back to older ones; its path or ``None``.

        :param restore: loads one checkpoint into the run; a :class:`CorruptCheckpointError`
            it raises skips that checkpoint with a warning for the next older one.
        """
        found = self.list_checkpoints()
        for index, (_, path) in enumerate(found):
            try:
                restore(path)
            except CorruptCheckpointError as exc:
                older = found[index + 1][1].name if index + 1 < len(found) else None
                instead = f"trying the older {older}" if older else "no older checkpoint to try"
                log.warning("skipping a bad checkpoint: %s; %s", exc, instead)
                continue
            return path
        return None


class FileCheckpointer(Checkpointer):
    """One file per step (``torch.save``, a zip archive), written through a temporary file.

    Integrity: every entry's CRC-32 is checked before a file is read, the first file a run
    writes is read back with ``weights_only=True`` (:mod:`plugtrain.train.state_check`).
    """

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Write ``state`` to :meth:`path` of ``step`` (atomically: temporary, fsync, rename)."""
        return single_file.save_checkpoint(self.path(step), dict(state))

    def verify(self, path: Path, state: Mapping[str, Any], owners: Mapping[str, Any]) -> None:
        """Read the file back with ``weights_only=True``; an unloadable one is removed."""
        verify_first_checkpoint(path, state, owners)

    def load(self, path: str | Path) -> dict[str, Any]:
        """The state in the file at ``path``, after its archive is checked."""
        return single_file.load_checkpoint(path)

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """The files named after :attr:`name` in :attr:`directory`, the newest first."""
        return single_file.find_checkpoints(self.directory, self.name)

    def remove(self, path: Path) -> None:
        """Delete the file (a missing one is fine)."""
        Path(path).unlink(missing_ok=True)

    def clean_up(self) -> list[Path]:
        """Delete the hidden temporaries of interrupted saves."""
        return single_file.remove_stale_temporaries(self.directory, self.name)
