"""One ``fit`` per model directory: a second one is refused, naming the process that holds it.

The lock (``fcntl.flock`` on ``MODEL_DIR/.plugtrain.lock``) is released by the kernel however
its holder ends, so the lock of a killed run is taken over, with a warning naming it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from support.reliability import (
    finish_process,
    last_line,
    start_plugtrain,
    wait_until,
    write_train_run,
)

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.train.checkpointing.run_folder.lock import LOCK_NAME, ModelDirBusyError
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _holder(model_dir: Path) -> dict[str, object]:
    text = (model_dir / LOCK_NAME).read_text() if (model_dir / LOCK_NAME).exists() else ""
    return json.loads(text) if text.strip() else {}


def _train_rows(model_dir: Path) -> list[int]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r["step"] for r in map(json.loads, lines) if r["split"] == "train"]


@pytest.mark.slow
@pytest.mark.parametrize("second", ["same run file", "another model"])
def test_l01_a_second_fit_on_a_model_dir_in_use_is_refused_naming_the_holder(second, tmp_path):
    first = write_train_run(
        tmp_path / "a",
        steps=100_000,
        every=10,
        **{"model_dir: " + str(tmp_path / "a/model"): f"model_dir: {tmp_path / 'shared'}"},
    )
    model_dir = tmp_path / "shared"
    running = start_plugtrain("fit", str(first))
    wait_until((model_dir / "checkpoint_10.mdl").exists, running)
    assert _holder(model_dir)["pid"] == running.pid

    hidden = 16 if second == "same run file" else 32
    other = write_train_run(
        tmp_path / "b",
        steps=30,
        every=10,
        hidden=hidden,
        **{"model_dir: " + str(tmp_path / "b/model"): f"model_dir: {model_dir}"},
    )
    refused = finish_process(start_plugtrain("fit", str(other)))
    assert refused.status == 1, refused.err
    assert "Traceback" not in refused.err
    assert "resumed" not in refused.err
    assert "step 1" not in refused.err
    line = last_line(refused.err)
    assert line.startswith(
        f"plugtrain: error: model_dir {model_dir} is in use by another fit (pid {running.pid}, "
        "started "
    ), line
    assert line.endswith("); wait for it to end, or give this run another model_dir"), line

    assert running.poll() is None  # the first run goes on, undisturbed
    running.send_signal(signal.SIGTERM)
    stopped = finish_process(running)
    assert stopped.status == 143, stopped.err
    rows = _train_rows(model_dir)
    assert rows == list(range(10, rows[-1] + 1, 10))  # every row once, from one run
    assert _holder(model_dir) == {}  # released


@pytest.mark.slow
def test_l02_the_lock_of_a_killed_fit_is_taken_over(tmp_path):
    run = write_train_run(tmp_path, steps=100_000, every=10)
    model_dir = tmp_path / "model"
    killed = start_plugtrain("fit", str(run))
    wait_until((model_dir / "checkpoint_10.mdl").exists, killed)
    os.killpg(killed.pid, signal.SIGKILL)
    finish_process(killed)
    assert _holder(model_dir)["pid"] == killed.pid  # left behind

    again = finish_process(
        start_plugtrain("fit", str(run), "--set", "trainer.init.loop.max_steps=12")
    )
    assert again.status == 0, again.err
    assert (
        f"plugtrain: model_dir {model_dir}: taking over the lock of pid {killed.pid}, started "
    ) in again.err
    assert ", which ended without releasing it" in again.err
    assert "resumed from" in again.err
    assert _holder(model_dir) == {}


def test_l03_a_fit_started_inside_another_fit_on_the_same_model_dir_is_refused(tmp_path):
    sgd = plugtrain.resolve("optimizer", "SGD")
    data = synthetic_loader(batch_size=16, num_examples=64, in_features=16, num_classes=4)

    def trainer(**changes: object) -> Trainer:
        return Trainer(
            device="CPU",
            model_dir=tmp_path,
            model=lambda: MLP(in_features=16, out_features=4, hidden=8),
            optimizer=lambda model: sgd(model.parameters(), lr=0.1),
            loop={"max_steps": 3},
            logging={"log_steps": 1},
            **changes,  # type: ignore[arg-type]
        )

    seen: list[BaseException] = []

    class StartAnother:
        def on_train_step_end(self, outer: Trainer, metrics: object) -> None:
            if outer.global_step == 2:
                try:
                    trainer().fit(data)
                except ModelDirBusyError as exc:
                    seen.append(exc)

    outer = trainer(callbacks=[StartAnother()])
    outer.fit(data)
    assert outer.global_step == 3
    (error,) = seen
    assert str(error).startswith(
        f"model_dir {tmp_path} is in use by another fit (pid {os.getpid()}, started "
    )
    assert torch.isfinite(outer.model.fc1.weight).all()
    again = trainer()
    again.fit(data)  # released after the fit: the next one may run (and resumes)
    assert again.loaded_step == 3
