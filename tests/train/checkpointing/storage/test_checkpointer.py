"""The Checkpointer contract, run against the single-file checkpointer; and that it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from plugtrain.testing.checkpointer_kit import CHECKPOINTER_PROPERTIES, check_checkpointer
from plugtrain.testing.conformance import ConformanceError
from plugtrain.train.checkpointing.storage.file import FileCheckpointer


def test_the_single_file_checkpointer_keeps_the_contract() -> None:
    report = check_checkpointer(FileCheckpointer)
    assert [r.name for r in report.results] == list(CHECKPOINTER_PROPERTIES)
    assert all(r.outcome == "passed" for r in report.results), str(report)


class _KeepsEverything(FileCheckpointer):
    """Breaks two properties: pruning deletes nothing, and clean-up leaves temporaries."""

    def remove(self, path: Path) -> None:
        pass

    def clean_up(self) -> list[Path]:
        return []


class _NoFallback(FileCheckpointer):
    def load(self, path: str | Path) -> dict[str, Any]:
        return super().load(self.path(2)) if Path(path) == self.path(1) else super().load(path)


def test_a_broken_checkpointer_is_named_with_each_failed_property() -> None:
    with pytest.raises(ConformanceError) as caught:
        check_checkpointer(_KeepsEverything)
    failed = {r.name for r in caught.value.report.failures}
    assert failed == {"prune", "clean_up"}
    report = check_checkpointer(_NoFallback, raise_on_failure=False)
    assert report.outcome("fallback") == "failed"


def test_a_save_whose_ownership_record_cannot_be_written_fails_by_name(
    tmp_path, monkeypatch
) -> None:
    import errno

    import torch

    from plugtrain.errors import CheckpointError
    from plugtrain.train.checkpointing.run_folder.ownership import Ownership

    def full_disk(self, names, owner=None) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    checkpointer = FileCheckpointer(tmp_path, "checkpoint_{step}.mdl")
    monkeypatch.setattr(Ownership, "_write", full_disk)
    with pytest.raises(CheckpointError) as caught:
        checkpointer.save(3, {"model": {"w": torch.ones(2)}, "global_step": 3})
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'checkpoint_3.mdl'}: saved, but recording it")
    assert "No space left on device" in message


def test_the_ownership_record_follows_the_umask_as_checkpoints_do(tmp_path) -> None:
    import os

    import torch

    checkpointer = FileCheckpointer(tmp_path, "checkpoint_{step}.mdl")
    previous = os.umask(0o022)
    try:
        checkpoint = checkpointer.save(1, {"model": {"w": torch.ones(1)}, "global_step": 1})
    finally:
        os.umask(previous)
    record = checkpointer.ownership.path
    assert oct(record.stat().st_mode & 0o777) == oct(checkpoint.stat().st_mode & 0o777) == "0o644"
