"""Run files end to end through the real command line, in subprocesses."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))

pytestmark = pytest.mark.slow


def plugtrain(*args: str, cwd: Path | None = None, timeout: float = 300):
    return subprocess.run(
        [sys.executable, "-m", "plugtrain", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


QUICK = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 5
    model:
      MLP: {{in_features: 64, hidden: 32, out_features: 10, dropout: 0.1}}
    optimizer:
      SGD: {{lr: 0.05, momentum: 0.9, weight_decay: 0.0001}}
    schedulers:
      - LinearLR: {{initial_learning_rate: 0.05, end_learning_rate: 0.001, total_iters: {steps}}}
    loop: {{max_steps: {steps}, eval_frequency: 0}}
    checkpoint: {{steps: {every}}}
    logging: {{log_steps: 10}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 32}}}}
    val_dataloader: {{Digits: {{batch_size: 256, split: val}}}}
"""


def write_run(tmp_path: Path, name: str = "run.yaml", steps: int = 40, every: int = 20) -> Path:
    path = tmp_path / name
    path.write_text(QUICK.format(model_dir=tmp_path / "model", steps=steps, every=every))
    return path


CHECK_EACH = """\
import json, os, runpy, sys
results = {}
for example, folder in json.loads(sys.argv[1]):
    os.chdir(folder)
    sys.argv = ["plugtrain", "check", example]
    try:
        runpy.run_module("plugtrain", run_name="__main__")
    except SystemExit as exit:
        code = exit.code
    results[example] = [code, "torch" in sys.modules]
    if "torch" in sys.modules:
        break
print(json.dumps(results))
"""
"""``plugtrain check`` of each example in turn, in one fresh interpreter: its exit code, and
whether torch was imported by then. It stops after a check that imported torch, since every
later check in that interpreter would look as if it had imported it too."""


@pytest.fixture(scope="module")
def example_checks(request: pytest.FixtureRequest) -> dict[str, list[Any]]:
    """Each example's ``[exit code, torch imported]``, in as few interpreters as can tell, each
    checked in the folder holding the data it reads (``stdlib_gpt_root``) or in this one."""
    data = {"runs/data/stdlib_gpt", "runs/data/encoders", "runs/data/dpo"}  # as example_cwd
    plan = []
    for example in EXAMPLES:
        text = example.read_text(encoding="utf-8")
        needs = any(folder in text for folder in data)
        folder = request.getfixturevalue("stdlib_gpt_root") if needs else Path.cwd()
        plan.append((str(example), str(folder)))
    results: dict[str, list[Any]] = {}
    while len(results) < len(plan):
        rest = [(example, folder) for example, folder in plan if example not in results]
        done = subprocess.run(
            [sys.executable, "-c", CHECK_EACH, json.dumps(rest)],
            capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        results.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return results


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_passes_check_without_importing_torch(example, example_checks):
    assert example_checks[str(example)] == [0, False]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One ``plugtrain fit`` of the 40-step run (its folder and the finished process): a run
    file of 60 steps cut to 40 by ``--set`` (its schedule still spans 60 steps).

    Read only: a test that runs more on it works on a copy (:func:`copy_of_fitted`).
    """
    tmp_path = tmp_path_factory.mktemp("fitted")
    run = str(write_run(tmp_path, steps=60))
    return tmp_path, plugtrain("fit", run, "--set", "trainer.init.loop.max_steps=40")


def copy_of_fitted(fitted: tuple[Path, subprocess.CompletedProcess], tmp_path: Path) -> Path:
    """The fitted model folder copied under ``tmp_path``, with a run file that names the copy."""
    folder, done = fitted
    assert done.returncode == 0, done.stderr
    shutil.copytree(folder / "model", tmp_path / "model")
    return write_run(tmp_path)


def test_fit_writes_metrics_checkpoints_and_the_schedule_plot(fitted):
    tmp_path, done = fitted
    assert done.returncode == 0, done.stderr
    assert "validation loss" in done.stdout
    model_dir = tmp_path / "model"
    assert sorted(p.name for p in model_dir.glob("*.mdl")) == [
        "checkpoint_20.mdl",
        "checkpoint_40.mdl",
    ]
    assert (model_dir / "schedule.png").stat().st_size > 0
    records = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [10, 20, 30, 40]
    assert [r["step"] for r in records if r["split"] == "val"] == [40]
    assert "step 10/40 loss" in done.stderr  # plain log lines when not on a terminal


def test_set_overrides_values(fitted):
    tmp_path, done = fitted  # the run file says 60 steps; --set said 40
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "model" / "checkpoint_60.mdl").exists()
    assert "step 40/40 loss" in done.stderr


def test_validate_evaluates_the_newest_checkpoint(fitted, tmp_path):
    run = copy_of_fitted(fitted, tmp_path)
    done = plugtrain("validate", str(run))
    assert done.returncode == 0, done.stderr
    assert "validation at step 40" in done.stderr


def test_a_bad_run_file_exits_2_with_positions_and_no_traceback(tmp_path):
    run = write_run(tmp_path)
    run.write_text(run.read_text().replace("lr: 0.05,", "lr: -1,").replace("MLP:", "MPL:"))
    done = plugtrain("fit", str(run))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"{run}:9:" in done.stderr
    assert "trainer.init.optimizer.SGD.lr: must be >= 0, got -1" in done.stderr
    assert "Did you mean 'MLP'?" in done.stderr
    assert not (tmp_path / "model").exists()


def test_check_rejects_python_tags_without_running_them(tmp_path):
    marker = tmp_path / "pwned"
    run = tmp_path / "evil.yaml"
    run.write_text(f'trainer: !!python/object/apply:os.system ["touch {marker}"]\n')
    done = plugtrain("check", str(run))
    assert done.returncode == 2
    assert f"{run}:1:10" in done.stderr
    assert not marker.exists()


def test_a_missing_run_file_is_a_clean_error(tmp_path):
    done = plugtrain("check", str(tmp_path / "nope.yaml"))
    assert done.returncode == 2
    assert "no such file" in done.stderr
    assert "Traceback" not in done.stderr


def test_two_trainers_run_in_order_sharing_a_backend(tmp_path):
    source = (ROOT / "examples" / "two_trainers.yaml").read_text()
    run = tmp_path / "two.yaml"
    run.write_text(source.replace("./runs/two_trainers", str(tmp_path / "model")))
    done = plugtrain("fit", str(run), "--set", "trainer.init.loop.max_steps=30")
    assert done.returncode == 0, done.stderr
    assert "trainer 1: validation loss" in done.stdout
    assert "validation at step 30" in done.stderr


def _final_weights(model_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / f"checkpoint_{step}.mdl", weights_only=True)["model"]


def test_a_run_killed_mid_training_resumes_to_bit_identical_weights(tmp_path):
    steps, every = 600, 100  # killed once checkpoint 200 exists: 400 steps before it could end
    straight_dir = tmp_path / "straight"
    straight_dir.mkdir()
    straight = write_run(straight_dir, steps=steps, every=every)
    assert main(["fit", str(straight)]) == 0  # the reference, in this process

    killed_dir = tmp_path / "killed"
    killed_dir.mkdir()
    killed = write_run(killed_dir, steps=steps, every=every)
    process = subprocess.Popen(
        [sys.executable, "-m", "plugtrain", "fit", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    first_checkpoint = killed_dir / "model" / f"checkpoint_{2 * every}.mdl"
    deadline = time.monotonic() + 240
    while not first_checkpoint.exists() and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (killed_dir / "model" / f"checkpoint_{steps}.mdl").exists()

    resumed = plugtrain("fit", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    expected = _final_weights(straight_dir / "model", steps)
    actual = _final_weights(killed_dir / "model", steps)
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
