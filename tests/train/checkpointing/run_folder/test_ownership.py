"""A run deletes only checkpoints it wrote; ``checkpoint_root`` is locked and owned (O01-O05).

Real Trainers, real files; ``KeepNCheckpoints`` is the shipped callback plugin.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from support.reliability import small_data, small_trainer, write_train_run

import plugtrain
from plugtrain.errors import CheckpointError, ModelDirBusyError
from plugtrain.train.checkpointing.run_folder.lock import ModelDirLock
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint
from plugtrain.train.checkpointing.storage.checkpointer import Checkpointer
from plugtrain.train.checkpointing.storage.file import FileCheckpointer


def _keep(n: int) -> Any:
    return plugtrain.resolve("callback", "KeepNCheckpoints")(n=n)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("checkpoint_*.mdl"))


def test_o01_fine_tuning_from_another_folders_checkpoint_keeps_that_checkpoint(tmp_path):
    source = tmp_path / "pretrained"
    small_trainer(source, max_steps=10, checkpoint_steps=5).fit(small_data())
    start = source / "checkpoint_10.mdl"
    before = start.read_bytes()
    tuned = small_trainer(
        tmp_path / "tuned", max_steps=25, checkpoint_steps=5, callbacks=[_keep(1)]
    )
    tuned.fit(small_data(), ckpt_path=start)
    assert start.read_bytes() == before  # was: "KeepNCheckpoints: deleted .../checkpoint_10.mdl"
    assert _names(source) == ["checkpoint_10.mdl", "checkpoint_5.mdl"]
    assert _names(tmp_path / "tuned") == ["checkpoint_25.mdl"]


def test_o02_a_copied_run_folder_never_deletes_the_originals_checkpoints(tmp_path):
    original = tmp_path / "a"
    small_trainer(original, max_steps=10, checkpoint_steps=5, callbacks=[_keep(2)]).fit(
        small_data()
    )
    assert _names(original) == ["checkpoint_10.mdl", "checkpoint_5.mdl"]
    copy = tmp_path / "b"
    shutil.copytree(original, copy)
    stamps = {p.name: p.stat().st_mtime_ns for p in original.iterdir()}
    small_trainer(copy, max_steps=30, checkpoint_steps=5, callbacks=[_keep(2)]).fit(small_data())
    assert {p.name: p.stat().st_mtime_ns for p in original.iterdir()} == stamps
    assert _names(original) == ["checkpoint_10.mdl", "checkpoint_5.mdl"]
    # the copy's own saves are pruned; the copied files are not this run's and stay
    assert _names(copy) == [
        "checkpoint_10.mdl",
        "checkpoint_25.mdl",
        "checkpoint_30.mdl",
        "checkpoint_5.mdl",
    ]


def test_o03_a_crafted_callback_state_naming_a_file_cannot_get_it_deleted(tmp_path):
    thesis = tmp_path / "thesis.tex"
    thesis.write_text("\\documentclass{book}")
    model_dir = tmp_path / "run"
    small_trainer(model_dir, max_steps=5, checkpoint_steps=5, callbacks=[_keep(1)]).fit(
        small_data()
    )
    crafted = model_dir / "checkpoint_5.mdl"
    state = load_checkpoint(crafted)
    state["callbacks"] = [{"name": "KeepNCheckpoints", "state": {"saved": [str(thesis)] * 3}}]
    save_checkpoint(crafted, state)
    small_trainer(model_dir, max_steps=20, checkpoint_steps=5, callbacks=[_keep(1)]).fit(
        small_data()
    )
    assert thesis.read_text() == "\\documentclass{book}"
    assert _names(model_dir) == ["checkpoint_20.mdl"]


class FolderCheckpointer(Checkpointer):
    """A folder per step, like a sharded (DCP) format: only ``save`` and ``remove`` written."""

    def save(self, step: int, state: Any) -> Path:
        folder = self.path(step)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(dict(state), folder / "state.pt")
        return folder

    def verify(self, path: Path, state: Any, owners: Any) -> None:
        """Nothing to verify here."""

    def load(self, path: str | Path) -> dict[str, Any]:
        return dict(torch.load(Path(path) / "state.pt", weights_only=True))

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        found = [(self.step_of(p), p) for p in self.directory.iterdir()]
        return sorted(((s, p) for s, p in found if s is not None), reverse=True)

    def remove(self, path: Path) -> None:
        shutil.rmtree(path)

    def clean_up(self) -> list[Path]:
        return []


@pytest.mark.parametrize("kind", [FileCheckpointer, FolderCheckpointer])
def test_o04_the_checkpointer_removes_and_prunes_only_what_it_wrote(tmp_path, kind):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    foreign = folder / ("checkpoint_1.mdl" if kind is FileCheckpointer else "checkpoint_1")
    if kind is FileCheckpointer:
        foreign.write_bytes(b"someone else's")
    else:
        foreign.mkdir()
        (foreign / "state.pt").write_bytes(b"someone else's")
    outside = tmp_path / "thesis.tex"
    outside.write_text("keep me")
    name = "checkpoint_{step}.mdl" if kind is FileCheckpointer else "checkpoint_{step}"
    checkpointer = kind(folder, name)
    for step in (2, 3, 4, 5):
        checkpointer.save(step, {"global_step": step})
    checkpointer.remove(outside)
    checkpointer.remove(foreign)
    checkpointer.remove(folder / ".." / "thesis.tex")
    assert outside.read_text() == "keep me"
    assert foreign.exists()
    removed = checkpointer.prune(2)
    assert [p.name for p in removed] == [name.format(step=2), name.format(step=3)]
    assert sorted(s for s, _ in checkpointer.list_checkpoints()) == [1, 4, 5]
    # a record copied with its folder is not trusted in the copy
    shutil.copytree(folder, tmp_path / "copy")
    copied = kind(tmp_path / "copy", name)
    assert copied.prune(0) == []
    assert sorted(s for s, _ in copied.list_checkpoints()) == [1, 4, 5]


def test_o05_checkpoint_root_is_locked_and_owned_by_one_run(tmp_path):
    root = tmp_path / "shared-ckpts"
    first = small_trainer(tmp_path / "a", max_steps=5, checkpoint={"checkpoint_root": str(root)})
    first.fit(small_data())
    assert _names(root) == ["checkpoint_5.mdl"]
    other = small_trainer(tmp_path / "b", max_steps=10, checkpoint={"checkpoint_root": str(root)})
    with pytest.raises(CheckpointError) as refused:
        other.fit(small_data())  # was: silently resumed a's weights at step 5
    assert str(refused.value) == (
        f"checkpoint_root {root} holds the checkpoints of the run in model_dir "
        f"{os.path.realpath(tmp_path / 'a')}, not of this run (model_dir {tmp_path / 'b'}); "
        "give this run its own checkpoint_root, or use that model_dir to resume that run"
    )
    assert other.global_step == 0
    # the owner resumes; while a fit holds the root, no other fit may use it
    again = small_trainer(tmp_path / "a", max_steps=10, checkpoint={"checkpoint_root": str(root)})
    with ModelDirLock(root, "checkpoint_root"), pytest.raises(ModelDirBusyError) as busy:
        again.fit(small_data())
    assert str(busy.value).startswith(f"checkpoint_root {root} is in use by another fit (pid ")
    again.fit(small_data())
    assert again.loaded_step == 5
    assert again.global_step == 10


def test_o06_the_launcher_names_the_checkpoint_in_checkpoint_root(tmp_path):
    from plugtrain.config import load_plan
    from plugtrain.launching.elastic import _stopped
    from plugtrain.launching.run_file import newest_checkpoints

    root = tmp_path / "ckpts"
    run = write_train_run(
        tmp_path,
        steps=10,
        every=5,
        **{"checkpoint: {steps: 5}": f"checkpoint: {{steps: 5, checkpoint_root: {root}}}"},
    )
    root.mkdir()
    save_checkpoint(root / "checkpoint_5.mdl", {"global_step": 5})
    plan, _registry = load_plan(run, ())
    message = _stopped(15, "the 2 processes", newest_checkpoints(plan.trainers)())
    # was: "no checkpoint was saved" (it looked in model_dir)
    assert f"the newest checkpoint is {root / 'checkpoint_5.mdl'}" in message
