"""Which checkpoints a checkpoint folder's run wrote: the only ones pruning may delete.

The record is ``CHECKPOINT_DIR/.plugtrain-checkpoints.json``, rewritten atomically (temporary
file, fsync, rename) after every save and removal::

    {"directory": "/abs/ckpts", "owner": "/abs/model_dir", "written": ["checkpoint_5.mdl", ...]}

``written`` holds bare names inside ``directory``, oldest first. A record is trusted only in the
folder it names: in a copy (``cp -r a b``) it names ``a``, so ``b``'s run owns none of the
copied checkpoints until it writes its own. Nothing a checkpoint holds (a callback's state) can
add to it, and a name with a path separator or ``..`` is ignored, so pruning never reaches
outside the folder. ``owner`` is the ``model_dir`` of the run the folder belongs to: a
``checkpoint_root`` shared by another run is refused (:meth:`Ownership.claim`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from plugtrain.errors import CheckpointError
from plugtrain.train.checkpointing.run_folder.disk import create_temporary

__all__ = ["RECORD_NAME", "CheckpointRootOwnedError", "Ownership"]

log = logging.getLogger("plugtrain")

RECORD_NAME = ".plugtrain-checkpoints.json"
"""The record's file name inside the checkpoint folder."""


class CheckpointRootOwnedError(CheckpointError):
    """The checkpoint folder belongs to a run with another ``model_dir``."""


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _plain_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and os.sep not in name
        and "\0" not in name
    )


class Ownership:
    """The record of the checkpoints written into ``directory`` by the run owning it.

    :param directory: the checkpoint folder (``checkpoint_root`` or ``model_dir``).
    :param owner: the ``model_dir`` of the run writing there (defaults to ``directory``).
    """

    def __init__(self, directory: str | os.PathLike[str], owner: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.owner = Path(owner)

    @property
    def path(self) -> Path:
        """The record file."""
        return self.directory / RECORD_NAME

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable (%s); no checkpoint counts as written here", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def _here(self, data: dict[str, Any]) -> bool:
        """Whether ``data`` was written for this folder (not copied from another)."""
        return data.get("directory") == _real(self.directory)

    def written(self) -> list[str]:
        """Names of the checkpoints written in this folder, oldest first (none in a copy)."""
        data = self._read()
        if not self._here(data):
            return []
        names = data.get("written")
        return [n for n in names if _plain_name(n)] if isinstance(names, list) else []

    def owns(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is a checkpoint this folder's run wrote."""
        candidate = Path(path)
        if _real(candidate.parent) != _real(self.directory):
            return False
        return candidate.name in self.written()

    def _write(self, names: list[str], owner: str | None = None) -> None:
        data = self._read()
        keep_owner = data.get("owner") if self._here(data) else None
        record = {
            "directory": _real(self.directory),
            "owner": owner or keep_owner or _real(self.owner),
            "written": names,
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = create_temporary(self.path)  # the umask's mode, as checkpoints
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(record, stream)
                stream.write("\n")
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def record(self, path: str | os.PathLike[str]) -> None:
        """Count ``path`` (just written in this folder) as this run's, the newest."""
        name = Path(path).name
        names = [n for n in self.written() if n != name]
        self._write([*names, name])

    def forget(self, path: str | os.PathLike[str]) -> None:
        """Drop ``path`` from the record (it was deleted)."""
        name = Path(path).name
        names = self.written()
        if name in names:
            self._write([n for n in names if n != name])

    def claim(self) -> None:
        """Make this run the folder's owner, or refuse a folder another run owns.

        :raises CheckpointRootOwnedError: the record names another ``model_dir``.
        """
        data = self._read()
        theirs = data.get("owner") if self._here(data) else None
        mine = _real(self.owner)
        if isinstance(theirs, str) and theirs != mine:
            message = (
                f"checkpoint_root {self.directory} holds the checkpoints of the run in "
                f"model_dir {theirs}, not of this run (model_dir {self.owner}); give this run "
                "its own checkpoint_root, or use that model_dir to resume that run"
            )
            raise CheckpointRootOwnedError(message)
        self._remove_stale_temporaries()
        if theirs is None:
            self._write(self.written(), owner=mine)

    def _remove_stale_temporaries(self) -> None:
        """Delete record temporaries an interrupted rewrite left (the run's lock is held)."""
        pattern = re.compile(re.escape(f".{RECORD_NAME}.") + r"[0-9a-f]{8}\Z")
        with contextlib.suppress(OSError):
            for entry in self.directory.iterdir():
                if pattern.match(entry.name) and entry.is_file():
                    entry.unlink(missing_ok=True)
                    log.info("removed %s, left by an interrupted save", entry)
