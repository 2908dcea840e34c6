"""What a killed and resumed run leaves behind is what an uninterrupted run would have left.

Metrics rows of the replayed steps are written once (the files are cut back to the resumed
step), an empty or headerless ``metrics.csv`` gets its header, hidden temporaries of interrupted
saves are removed when a fit starts, checkpoints follow the umask like the metrics files, and
a run file with lists and mappings in every section saves and resumes.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
from pathlib import Path

import pytest
import torch
from support.reliability import (
    finish_process,
    run_cli,
    small_data,
    small_trainer,
    start_plugtrain,
    wait_until,
    write_train_run,
)

from plugtrain.cli import main
from plugtrain.train.checkpointing.storage.archive import load_checkpoint
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _trainer(model_dir: Path, **changes: object) -> Trainer:
    return small_trainer(model_dir, max_steps=10, dropout=0.0, **changes)


def _data() -> torch.utils.data.DataLoader:
    return small_data()


def _jsonl(model_dir: Path) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("time")
        row.pop("steps_per_second", None)
    return rows


def _csv(model_dir: Path) -> list[list[str]]:
    with (model_dir / "metrics.csv").open(newline="") as handle:
        return [row for row in csv.reader(handle) if row[2:3] != ["steps_per_second"]]


def _has_train_row(model_dir: Path, step: int) -> bool:
    path = model_dir / "metrics.jsonl"
    return path.exists() and f'"step": {step}, "split": "train"' in path.read_text()


@pytest.mark.slow
def test_r01_replayed_steps_appear_once_in_the_metrics_files(tmp_path):
    steps = 60
    straight = write_train_run(
        tmp_path / "straight", steps=steps, every=20, **{"{log_steps: 20}": "{log_steps: 1}"}
    )
    assert main(["fit", str(straight)]) == 0  # the uninterrupted reference, in this process

    cut = write_train_run(
        tmp_path / "cut", steps=steps, every=20, **{"{log_steps: 20}": "{log_steps: 1}"}
    )
    model_dir = tmp_path / "cut/model"
    process = start_plugtrain("fit", str(cut))
    # Killed after checkpoint 20 with rows of later steps written: they will be replayed.
    wait_until(lambda: _has_train_row(model_dir, 25), process)
    os.killpg(process.pid, signal.SIGKILL)
    finish_process(process)
    assert any(row["step"] > 20 for row in _jsonl(model_dir))  # type: ignore[operator]
    with (model_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 31, "spl')  # the half-written line a kill can leave

    resumed = finish_process(start_plugtrain("fit", str(cut)))
    assert resumed.status == 0, resumed.err
    assert "resumed from" in resumed.err
    assert "plugtrain: metrics: removed " in resumed.err
    rows = _jsonl(model_dir)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert rows == _jsonl(tmp_path / "straight/model")  # the same values: an exact resume
    table = _csv(model_dir)
    assert table[0] == ["step", "split", "name", "value"]
    assert table == _csv(tmp_path / "straight/model")


def test_r02_an_empty_metrics_csv_gets_its_header(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "metrics.csv").write_text("")  # what a kill right after creating it leaves
    _trainer(tmp_path).fit(_data())
    table = _csv(tmp_path)
    assert table[0] == ["step", "split", "name", "value"]
    assert [row[0] for row in table[1:]].count("1") >= 1
    assert sum(row == ["step", "split", "name", "value"] for row in table) == 1


def test_r02_a_csv_without_header_gets_it_when_resuming(tmp_path):
    _trainer(tmp_path, loop={"max_steps": 5}).fit(_data())
    path = tmp_path / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[1:]))  # as the header-losing versions left it
    _trainer(tmp_path).fit(_data())
    table = _csv(tmp_path)
    assert table[0] == ["step", "split", "name", "value"]
    assert sorted({int(row[0]) for row in table[1:]}) == list(range(1, 11))


def test_r03_temporaries_of_interrupted_saves_are_removed_when_fit_starts(tmp_path, caplog):
    _trainer(tmp_path, loop={"max_steps": 5}).fit(_data())
    stale = [tmp_path / ".checkpoint_10.mdl.a1b2c3d4", tmp_path / ".checkpoint_7.mdl.tmpx_9"]
    for path in stale:
        path.write_bytes(b"half a checkpoint")
    kept = [tmp_path / ".checkpoint_notes", tmp_path / "checkpoint_10.mdl.bak"]
    for path in kept:
        path.write_text("not ours")
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        _trainer(tmp_path).fit(_data())
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)
    for path in stale:
        assert f"removed {path}, left by an interrupted save" in caplog.messages


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_r04_checkpoints_follow_the_umask_like_the_metrics(umask, tmp_path):
    run = write_train_run(tmp_path, steps=5, every=5)
    previous = os.umask(umask)  # the process's umask, as a shell would have set it
    try:
        outcome = run_cli("fit", str(run))
    finally:
        os.umask(previous)
    assert outcome.status == 0, outcome.err
    expected = 0o666 & ~umask
    for name in ("checkpoint_5.mdl", "metrics.jsonl", "metrics.csv"):
        assert (tmp_path / "model" / name).stat().st_mode & 0o777 == expected, name


LISTS_EVERYWHERE = """\
plugins: []
trainer:
  - trainer:
      init:
        backend: {{backend_type: CPU}}
        model_dir: {model_dir}
        seed: 5
        model:
          MLP: {{in_features: 64, hidden: 16, out_features: 10}}
        optimizer:
          AdamW:
            lr: 0.001
            betas: [0.9, 0.95]
            params:
              - {{params: ["*bias"], tag: bias}}
              - {{params: "fc1*", tag: first}}
        schedulers:
          - SequentialLR:
              schedulers:
                - LinearLR: {{initial_learning_rate: 0.001, end_learning_rate: 0.0001,
                              total_iters: 4}}
                - CosineDecayLR: {{initial_learning_rate: 0.0001, end_learning_rate: 0.00001,
                                   total_iters: 40}}
              milestones: [4]
          - CosineDecayWD: {{initial_weight_decay: 0.01, end_weight_decay: 0.001,
                             total_iters: 40, param_group_tags: [bias]}}
        loop: {{max_steps: {steps}, eval_frequency: 5}}
        checkpoint: {{steps: 5}}
        logging: {{log_steps: 5}}
      fit:
        train_dataloader: {{Digits: {{batch_size: 16}}}}
        val_dataloader: {{Digits: {{batch_size: 64, split: val}}}}
      validate:
        val_dataloader: {{Digits: {{batch_size: 64, split: val}}}}
"""


@pytest.mark.slow
def test_r05_a_run_file_with_lists_and_mappings_everywhere_saves_and_resumes(tmp_path):
    def write(steps: int) -> Path:
        path = tmp_path / "run.yaml"
        path.write_text(LISTS_EVERYWHERE.format(model_dir=tmp_path / "model", steps=steps))
        return path

    # check, the first fit and validate in this process; the resume in a fresh one
    check = run_cli("check", str(write(10)))
    assert check.status == 0, check.err
    first = run_cli("fit", str(write(10)))
    assert first.status == 0, first.err
    assert load_checkpoint(tmp_path / "model/checkpoint_10.mdl")["global_step"] == 10
    again = finish_process(start_plugtrain("fit", str(write(15))))
    assert again.status == 0, again.err
    assert f"resumed from {tmp_path / 'model/checkpoint_10.mdl'} at step 10" in again.err
    validated = run_cli("validate", str(write(15)))
    assert validated.status == 0, validated.err
    assert "trainer 0: validation " in validated.out
