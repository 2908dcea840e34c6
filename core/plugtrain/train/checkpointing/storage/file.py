"""The ``file`` checkpoint format: one ``torch.save`` archive per step (the default)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plugtrain.train.checkpointing.state import verify_first_checkpoint
from plugtrain.train.checkpointing.storage import archive
from plugtrain.train.checkpointing.storage.checkpointer import Checkpointer

__all__ = ["FileCheckpointer"]


class FileCheckpointer(Checkpointer):
    """One file per step (``torch.save``, a zip archive), written through a temporary file.

    Integrity: every entry's CRC-32 is checked before a file is read, the first file a run
    writes is read back with ``weights_only=True`` (:mod:`.state_rule`).
    """

    def save(self, step: int, state: Mapping[str, Any]) -> Path:
        """Write ``state`` to :meth:`path` of ``step`` (atomically: temporary, fsync, rename)."""
        return archive.save_checkpoint(self.path(step), dict(state))

    def verify(self, path: Path, state: Mapping[str, Any], owners: Mapping[str, Any]) -> None:
        """Read the file back with ``weights_only=True``; an unloadable one is removed."""
        verify_first_checkpoint(path, state, owners)

    def load(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """The state in the file at ``path``, after its archive is checked."""
        return archive.load_checkpoint(path)

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """The files named after :attr:`name` in :attr:`directory`, the newest first."""
        return archive.find_checkpoints(self.directory, self.name)

    def remove(self, path: Path) -> None:
        """Delete the file (a missing one is fine)."""
        Path(path).unlink(missing_ok=True)

    def clean_up(self) -> list[Path]:
        """Delete the hidden temporaries of interrupted saves."""
        return archive.remove_stale_temporaries(self.directory, self.name)
