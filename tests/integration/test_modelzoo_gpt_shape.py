"""A run file in the shape of Model Zoo's GPT-3 configs checks, trains and validates on CPU.

``examples/modelzoo_gpt_shape.yaml`` has the sections Cerebras writes (``backend``, ``AdamW``
with ``correct_bias`` and no ``lr``, a ``SequentialLR`` warm-up then decay, ``precision`` with
bf16 and clipping, ``callbacks`` with ``ComputeNorm`` and a scoped ``csx.*`` flag, ``loggers``
with TensorBoard, ``fit``, ``validate`` and ``validate_all`` with YAML anchors) and runs through
the real command line, in subprocesses.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from support.plugtrain_cli import run_plugtrain

pytestmark = pytest.mark.slow  # every test reads the files of one real fit, in a subprocess

RUN = Path(__file__).resolve().parents[2] / "examples" / "modelzoo_gpt_shape.yaml"
MODEL_DIR = "runs/modelzoo_gpt_shape"


def _plugtrain(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    return run_plugtrain(*args, str(RUN), cwd=cwd, env=environment, timeout=600)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    cwd = tmp_path_factory.mktemp("gpt_shape")
    runs = {command: _plugtrain(command, cwd=cwd) for command in ("check", "fit", "validate_all")}
    return {"cwd": cwd, **runs}


def _records(cwd: Path) -> list[dict[str, float]]:
    lines = (cwd / MODEL_DIR / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_it_checks_with_the_model_zoo_warnings_at_their_positions(trained):
    checked = trained["check"]
    assert checked.returncode == 0, checked.stderr
    assert "modelzoo_gpt_shape.yaml: OK (1 trainer)" in checked.stdout
    assert "trainer: backend CPU; fit, validate, validate_all" in checked.stdout
    # Model Zoo's file writes no lr: its untagged SequentialLR sets every group's, so the
    # default is never used and nothing is said about it.
    assert "no lr written" not in checked.stderr


def test_it_trains_with_bf16_clipping_and_compute_norm(trained):
    fitted = trained["fit"]
    assert fitted.returncode == 0, fitted.stderr
    assert "Traceback" not in fitted.stderr
    assert "csx.performance.micro_batch_size only act on the CSX backend" in fitted.stderr
    train = [r for r in _records(trained["cwd"]) if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(10, 121, 10))
    for record in train:
        assert math.isfinite(record["grad_norm"])
        assert record["grad_norm"] > 0
        assert record["model_wise_grad_norm"] > 0
        assert record["model_wise_params_norm"] > 0
    # the warm-up rises linearly to 6e-3 in 20 steps, the cosine decay ends at 6e-4 at step 120;
    # both param groups (with and without weight decay) follow it
    for group in ("lr/0", "lr/1"):
        lrs = [r[group] for r in train]
        assert lrs[:2] == pytest.approx([3e-3, 6e-3], rel=1e-6)
        assert lrs[-1] == pytest.approx(6e-4, rel=1e-6)
        assert lrs[1:] == sorted(lrs[1:], reverse=True)
    val = [r for r in _records(trained["cwd"]) if r["split"] == "val"]
    assert val[-1]["accuracy"] > 0.85  # 10 classes: chance is 0.1


def test_keep_n_checkpoints_left_the_newest_two(trained):
    folder = trained["cwd"] / MODEL_DIR
    assert sorted(p.name for p in folder.glob("checkpoint_*.mdl")) == [
        "checkpoint_120.mdl",
        "checkpoint_80.mdl",
    ]


def test_validate_all_evaluates_each_kept_checkpoint(trained):
    validated = trained["validate_all"]
    assert validated.returncode == 0, validated.stderr
    lines = validated.stdout.splitlines()
    assert [line.split(" on ")[0] for line in lines] == [
        f"trainer 0: validation of {MODEL_DIR}/checkpoint_80.mdl (step 80)",
        f"trainer 0: validation of {MODEL_DIR}/checkpoint_120.mdl (step 120)",
    ]
    records = [r for r in _records(trained["cwd"]) if r["split"].startswith("validate_all/")]
    assert [r["step"] for r in records] == [80, 120]


def test_tensorboard_holds_the_logged_scalars(trained):
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    ).EventAccumulator
    events = trained["cwd"] / MODEL_DIR / "events"
    steps: dict[str, list[int]] = {}
    for path in sorted(events.glob("events.out.tfevents.*")):
        reader = accumulator(str(path))
        reader.Reload()
        for tag in reader.Tags()["scalars"]:
            steps.setdefault(tag, []).extend(e.step for e in reader.Scalars(tag))
    assert sorted(steps["train/grad_norm"]) == list(range(10, 121, 10))
    assert 120 in steps["val/accuracy"]
