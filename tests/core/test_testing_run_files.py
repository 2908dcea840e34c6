"""``plugtrain.testing``'s run-file helpers: write a run file, run ``plugtrain`` on it."""

from __future__ import annotations

import json

import pytest
import yaml

from plugtrain.testing import PlugtrainResult, run_plugtrain, trainer_run, write_run_file

INIT = {
    "backend": {"backend_type": "CPU"},
    "seed": 1,
    "model": {"MLP": {"in_features": 64, "hidden": 8, "out_features": 10}},
    "optimizer": {"SGD": {"lr": 0.1}},
    "loop": {"max_steps": 2},
}
FIT = {"train_dataloader": {"Digits": {"batch_size": 8, "split": "train"}}}


def test_trainer_run_keeps_the_steps_given_and_leaves_out_none():
    run = trainer_run(INIT, fit=FIT, validate=None)
    assert run == {"trainer": {"init": INIT, "fit": FIT}}
    assert list(run["trainer"]) == ["init", "fit"]


def test_write_run_file_into_a_folder_or_at_a_path_keeps_the_key_order(tmp_path):
    run = trainer_run(INIT, fit=FIT)
    into_folder = write_run_file(tmp_path / "new" / "folder", run)
    assert into_folder == tmp_path / "new" / "folder" / "run.yaml"
    at_path = write_run_file(tmp_path / "other.yml", run)
    assert at_path == tmp_path / "other.yml"
    for path in (into_folder, at_path):
        assert yaml.safe_load(path.read_text(encoding="utf-8")) == run
    first_keys = [line.split(":")[0].strip() for line in at_path.read_text().splitlines()[2:7]]
    assert first_keys == ["backend", "backend_type", "seed", "model", "MLP"]
    text = "trainer: {init: {}}\n"
    assert write_run_file(tmp_path, text, name="as_is.yaml").read_text() == text


def test_run_plugtrain_in_this_process_gives_status_and_both_streams(tmp_path):
    path = write_run_file(tmp_path, trainer_run(INIT, fit=FIT))
    checked = run_plugtrain("check", path)
    assert checked == PlugtrainResult(0, f"trainer: backend CPU; fit\n{path}: OK (1 trainer)\n", "")
    bad = write_run_file(tmp_path / "bad.yaml", trainer_run({**INIT, "seed": -1}, fit=FIT))
    refused = run_plugtrain("check", bad)
    assert refused.status == 2
    assert refused.out == ""
    assert "trainer.init.seed" in refused.err
    assert run_plugtrain("check").status == 2  # argparse: RUN.yaml missing
    assert run_plugtrain("--version").status == 0
    with pytest.raises(ValueError, match="subprocess_run=True"):
        run_plugtrain("check", path, cwd=tmp_path)


@pytest.mark.slow
def test_run_plugtrain_in_a_new_process_trains_in_its_folder(tmp_path):
    run = trainer_run({**INIT, "model_dir": "model", "logging": {"log_steps": 1}}, fit=FIT)
    path = write_run_file(tmp_path, run)
    result = run_plugtrain("fit", path.name, subprocess_run=True, cwd=tmp_path)
    assert result.status == 0, result.err
    rows = (tmp_path / "model" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows if "loss" in json.loads(row)] == [1, 2]
