"""Where checkpoints live: the :class:`Checkpointer` interface every format implements.

The Trainer composes the state (:mod:`.trainer_state`); a checkpointer writes
it, lists what was written, verifies it, reads it back, prunes old ones and, when resuming,
falls back from a damaged newest checkpoint to an older sound one. A sharded format (one
folder per step, :mod:`.dcp`) is a second implementation beside one archive per step
(:mod:`.file`); the loop does not change.

Ownership is kept here, for every implementation: each ``save`` of a subclass is recorded in the
folder's :class:`.ownership.Ownership` record, and ``remove`` (hence ``prune``)
deletes only recorded checkpoints of this folder, whatever a caller or a loaded state names.
"""

from __future__ import annotations

import abc
import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from plugtrain.errors import CheckpointError, CorruptCheckpointError
from plugtrain.train.checkpointing.run_folder import Ownership
from plugtrain.train.checkpointing.storage import archive

__all__ = ["Checkpointer"]

log = logging.getLogger("plugtrain")


class Checkpointer(abc.ABC):
    """Saves, lists, verifies, loads and prunes the checkpoints of one run.

    :param directory: where the checkpoints are written and found.
    :param name: the file (or folder) name pattern, with ``{step}``.
    :param owner: the ``model_dir`` of the run writing here (``directory`` when not given);
        see :meth:`claim`.

    A subclass implements :meth:`save` and :meth:`remove` as plain writes and deletions; the
    base class wraps them so that every checkpoint saved is recorded as this folder's and a
    checkpoint not recorded (another run's, a copied folder's, a path outside the folder) is
    never deleted.
    """

    collective = False
    """Whether every process calls :meth:`save` (each writes its shard); else the writer only."""

    sharded = False
    """Whether :meth:`save` takes the model and optimizer as this process's shards (DTensors)
    and :meth:`load` returns them so; else they are full tensors (gathered under FSDP2)."""

    def __init__(self, directory: Path, name: str, owner: Path | None = None) -> None:
        self.directory = Path(directory)
        self.name = name
        self.owner = Path(owner) if owner is not None else self.directory

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "save" in cls.__dict__:
            cls.save = _recording(cls.__dict__["save"])  # type: ignore[method-assign]
        if "remove" in cls.__dict__:
            cls.remove = _guarded(cls.__dict__["remove"])  # type: ignore[method-assign]

    @property
    def ownership(self) -> Ownership:
        """The record of the checkpoints this folder's run wrote."""
        return Ownership(self.directory, self.owner)

    def owns(self, path: str | Path) -> bool:
        """Whether ``path`` is a checkpoint this folder's run wrote (and so may delete)."""
        return self.ownership.owns(path)

    def claim(self) -> None:
        """Make the folder this run's (by its ``owner``), under the run's lock.

        :raises CheckpointRootOwnedError: the folder belongs to a run with another model_dir.
        """
        self.ownership.claim()

    def path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""
        return self.directory / self.name.format(step=step)

    def step_of(self, path: str | Path) -> int | None:
        """The step of a checkpoint named after :attr:`name`, else ``None``."""
        return archive.checkpoint_step(Path(path).name, self.name)

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
    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The state stored at ``path``.

        :raises CorruptCheckpointError: the checkpoint is damaged.
        :raises CheckpointError: it cannot be read.
        """

    @abc.abstractmethod
    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """``(step, path)`` of every checkpoint in :attr:`directory`, the newest first."""

    @abc.abstractmethod
    def remove(self, path: Path) -> None:
        """Delete one checkpoint this run wrote; any other path is left alone with a warning."""

    @abc.abstractmethod
    def clean_up(self) -> list[Path]:
        """Remove what interrupted saves left behind; returns it. Only under the run's lock."""

    def wait(self) -> None:  # noqa: B027 - a default, not an abstract method
        """Wait until a save running in the background is complete (here: none runs)."""

    def newest(self) -> Path | None:
        """The checkpoint with the highest step, or ``None``."""
        found = self.list_checkpoints()
        return found[0][1] if found else None

    def prune(self, keep: int, spare: Path | None = None) -> list[Path]:
        """Delete all but the ``keep`` newest checkpoints this run wrote; the deleted paths.

        "Newest" is the order of writing. Checkpoints the run did not write (older runs',
        copied ones, a fine-tuning run's ``ckpt_path``) are neither counted nor deleted.

        :param spare: a checkpoint never deleted (the one just saved).
        """
        written = [self.directory / name for name in self.ownership.written()]
        spared = Path(spare) if spare is not None else None
        # the one just saved counts even while a background save is still writing it
        present = [p for p in written if p.exists() or p.is_symlink() or p == spared]
        doomed = present[: max(len(present) - keep, 0)]
        removed = [path for path in doomed if spare is None or path != Path(spare)]
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


def _recording(save: Callable[..., Path]) -> Callable[..., Path]:
    @functools.wraps(save)
    def recorded(self: Checkpointer, step: int, state: Mapping[str, Any]) -> Path:
        path = save(self, step, state)
        if getattr(self, "is_writer", True):  # a collective save: the writer records it once
            try:
                self.ownership.record(path)
            except OSError as exc:
                self.wait()  # a background save's own failure is the one to report
                raise CheckpointError(
                    f"{path}: saved, but recording it as this run's in {self.ownership.path} "
                    f"failed: {exc}"
                ) from exc
        return path

    return recorded


def _guarded(remove: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(remove)
    def guarded(self: Checkpointer, path: Path) -> None:
        ownership = self.ownership
        if not ownership.owns(path):
            log.warning(
                "not deleting %s: this run did not write it (only checkpoints recorded in "
                "%s are deleted)",
                path,
                ownership.path,
            )
            return
        remove(self, path)
        ownership.forget(path)

    return guarded
