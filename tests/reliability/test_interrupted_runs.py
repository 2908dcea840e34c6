"""Interrupted and failing runs lose no work.

SIGINT finishes the step, saves a checkpoint and exits 130; the run resumes bit-for-bit.
SIGKILL during a checkpoint write leaves the previous checkpoint as the newest complete one.
A model directory that cannot hold a checkpoint (read-only, full, not a directory) is refused
before the first step. A NaN or infinite loss stops the run (or, with ``nan_policy: skip_step``,
drops that step's update).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from support.reliability import HANG_GUARD_S, Outcome, small_data, small_trainer, tmpfs

from plugtrain.builtin.models import MLP
from plugtrain.cli import main
from plugtrain.errors import CheckpointError, ConfigError, TrainingError
from plugtrain.train.checkpointing.storage.archive import find_latest, load_checkpoint
from plugtrain.train.distributed import TrainingInterrupted
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 3
    model:
      MLP: {{in_features: 64, hidden: {hidden}, out_features: 10, dropout: 0.1}}
    optimizer:
      SGD: {{lr: {lr}, momentum: 0.9}}
    schedulers:
      - LinearLR: {{initial_learning_rate: {lr}, end_learning_rate: 0.001, total_iters: 500}}
    loop: {{max_steps: {steps}}}
    checkpoint: {{steps: {every}}}
    logging: {{log_steps: {every}}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 16}}}}
"""


def write_run(
    folder: Path, *, steps: int, every: int, hidden: int = 16, lr: float = 0.05, **changes: str
) -> Path:
    """A run file training an MLP on Digits into ``folder/model``."""
    folder.mkdir(parents=True, exist_ok=True)
    text = RUN.format(model_dir=folder / "model", steps=steps, every=every, hidden=hidden, lr=lr)
    for old, new in changes.items():
        text = text.replace(old, new)
    path = folder / "run.yaml"
    path.write_text(text)
    return path


def start_fit(run: Path, **popen: object) -> subprocess.Popen[str]:
    """``plugtrain fit RUN`` in its own process group, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "plugtrain", "fit", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,  # type: ignore[call-overload]
    )


def finish(process: subprocess.Popen[str]) -> Outcome:
    """Wait for ``process`` (a hang guard, not a time limit) and collect its outcome."""
    try:
        out, err = process.communicate(timeout=HANG_GUARD_S * 4)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return Outcome(process.returncode, out, err)


def fit(run: Path, **popen: object) -> Outcome:
    """Run ``plugtrain fit RUN`` to the end."""
    return finish(start_fit(run, **popen))


def wait_for(condition: object, process: subprocess.Popen[str]) -> None:
    """Poll ``condition()`` every millisecond while ``process`` runs (hang-guarded)."""
    deadline = time.monotonic() + HANG_GUARD_S * 4
    while not condition():  # type: ignore[operator]
        assert process.poll() is None, "the run ended before the moment to interrupt it"
        assert time.monotonic() < deadline, "the moment to interrupt never came"
        time.sleep(0.001)


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The model weights stored in a checkpoint."""
    return load_checkpoint(path)["model"]


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Same names, same bits."""
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert torch.equal(value, b[name]), name


# -- SIGINT ------------------------------------------------------------------------------------


def _trainer(tmp_path: Path, **changes: object) -> Trainer:
    return small_trainer(tmp_path / "run", **changes)


def _data() -> torch.utils.data.DataLoader:
    return small_data()


class SignalAt:
    """A callback that sends this process SIGINT ``times`` times at the end of step ``step``."""

    def __init__(self, step: int, times: int = 1) -> None:
        self.step = step
        self.times = times

    def on_train_step_end(self, trainer: Trainer, metrics: object) -> None:
        if trainer.global_step == self.step:
            for _ in range(self.times):
                signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("step", [7, 10, 20])
def test_i01_sigint_in_fit_saves_the_step_and_resumes_bit_for_bit(step, tmp_path):
    straight = _trainer(tmp_path / "straight")
    straight.fit(_data())

    before = signal.getsignal(signal.SIGINT)
    interrupted = _trainer(tmp_path / "cut", callbacks=[SignalAt(step)])
    with pytest.raises(TrainingInterrupted) as info:
        interrupted.fit(_data())
    saved = tmp_path / "cut/run" / f"checkpoint_{step}.mdl"
    assert str(info.value) == (
        f"interrupted at step {step}; checkpoint saved to {saved}; "
        "run the same command again to resume"
    )
    assert signal.getsignal(signal.SIGINT) is before
    assert load_checkpoint(saved)["global_step"] == step
    assert find_latest(tmp_path / "cut/run") == saved

    resumed = _trainer(tmp_path / "cut", seed=99)
    resumed.fit(_data())
    assert resumed.global_step == 20
    assert_bit_identical(straight.model.state_dict(), resumed.model.state_dict())


def test_i01_a_second_sigint_stops_at_once(tmp_path):
    trainer = _trainer(tmp_path, callbacks=[SignalAt(7, times=2)])
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.fit(_data())
    assert not isinstance(info.value, TrainingInterrupted)
    assert not (tmp_path / "run/checkpoint_7.mdl").exists()
    assert (tmp_path / "run/checkpoint_5.mdl").exists()


def test_i01_fit_off_the_main_thread_installs_no_handler(tmp_path):
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    class Spy:
        def on_train_step_end(self, trainer: Trainer, metrics: object) -> None:
            seen.append(signal.getsignal(signal.SIGINT))

    errors: list[BaseException] = []

    def work() -> None:
        try:
            _trainer(tmp_path, callbacks=[Spy()], loop={"max_steps": 3}).fit(_data())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not errors
    assert seen == [before] * 3


@pytest.mark.slow
def test_i02_sigint_to_plugtrain_fit_exits_130_and_the_run_resumes_bit_for_bit(tmp_path):
    steps, every = 200, 10
    straight = write_run(tmp_path / "straight", steps=steps, every=every)
    assert main(["fit", str(straight)]) == 0  # the uninterrupted reference, in this process

    cut = write_run(tmp_path / "cut", steps=steps, every=every)
    process = start_fit(cut)
    wait_for((tmp_path / "cut/model/checkpoint_20.mdl").exists, process)
    process.send_signal(signal.SIGINT)
    outcome = finish(process)
    assert outcome.status == 130, outcome.err
    assert "Traceback" not in outcome.err
    last = outcome.err.strip().splitlines()[-1]
    prefix = "plugtrain: interrupted at step "
    assert last.startswith(prefix), last
    step = int(last[len(prefix) :].split(";")[0])
    assert 20 <= step < steps
    saved = tmp_path / "cut/model" / f"checkpoint_{step}.mdl"
    assert last == (
        f"{prefix}{step}; checkpoint saved to {saved}; run the same command again to resume"
    )
    assert load_checkpoint(saved)["global_step"] == step

    resumed = fit(cut)
    assert resumed.status == 0, resumed.err
    assert f"resumed from {saved} at step {step}" in resumed.err
    final = f"checkpoint_{steps}.mdl"
    assert_bit_identical(
        weights(tmp_path / "straight/model" / final), weights(tmp_path / "cut/model" / final)
    )


# -- SIGKILL during a checkpoint write -----------------------------------------------------------


@pytest.mark.slow
def test_i03_sigkill_while_a_checkpoint_is_written_keeps_the_previous_one(tmp_path):
    # About 40 MB per checkpoint (weights and momentum): writing one takes a while.
    run = write_run(tmp_path, steps=20, every=5, hidden=64_000)
    model_dir = tmp_path / "model"
    process = start_fit(run)
    first = model_dir / "checkpoint_5.mdl"

    def second_is_being_written() -> bool:
        partial = list(model_dir.glob(".checkpoint_10.mdl.*")) if first.exists() else []
        return any(p.stat().st_size > 0 for p in partial if p.exists())

    wait_for(second_is_being_written, process)
    os.killpg(process.pid, signal.SIGKILL)
    finish(process)
    assert process.returncode == -signal.SIGKILL

    assert not (model_dir / "checkpoint_10.mdl").exists()
    assert len(list(model_dir.glob(".checkpoint_10.mdl.*"))) == 1  # left behind, never loaded
    assert find_latest(model_dir) == first
    assert load_checkpoint(first)["global_step"] == 5

    resumed = fit(write_run(tmp_path, steps=6, every=5, hidden=64_000))
    assert resumed.status == 0, resumed.err
    assert f"resumed from {first} at step 5" in resumed.err
    assert load_checkpoint(model_dir / "checkpoint_6.mdl")["global_step"] == 6
    assert not list(model_dir.glob(".checkpoint_10.mdl.*"))  # removed when the next fit started


# -- model directories that cannot hold a checkpoint ------------------------------------------


def _refused_before_training(outcome: Outcome, model_dir: Path, reason: str) -> None:
    assert outcome.status == 1, outcome
    assert "Traceback" not in outcome.err
    assert f"plugtrain: error: model_dir {model_dir} {reason}" in outcome.err, outcome.err
    assert "step 1" not in outcome.err
    assert not list(model_dir.glob("*.mdl")) if model_dir.is_dir() else True


@pytest.mark.slow
def test_i04_a_model_dir_below_a_file_is_refused_before_training(tmp_path):
    (tmp_path / "model").write_text("a file where the model directory should be")
    run = write_run(tmp_path, steps=5, every=5)
    _refused_before_training(fit(run), tmp_path / "model", "cannot be written: ")


def _limit_file_size(limit: int) -> object:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_i05_a_model_dir_without_room_is_refused_before_training_rlimit(tmp_path):
    # A "full" disk simulated with RLIMIT_FSIZE: no file of this process may exceed 64 KiB,
    # while one checkpoint needs about 2.6 MB (weights and momentum of a 4096-wide MLP).
    run = write_run(tmp_path, steps=5, every=5, hidden=4096)
    outcome = fit(run, preexec_fn=_limit_file_size(64 * 1024))
    _refused_before_training(outcome, tmp_path / "model", "has no room for a checkpoint (about ")
    assert "File too large" in outcome.err


def test_i05_a_model_dir_on_a_full_disk_is_refused_before_training_tmpfs(tmp_path):
    with tmpfs(tmp_path, "1m") as disk:
        wide = MLP(in_features=64, out_features=10, hidden=4096)  # about 1.2 MB of weights
        trainer = _trainer(disk, model=wide, loop={"max_steps": 5})
        with pytest.raises(TrainingError) as info:
            trainer.fit(_data())
        assert str(info.value).startswith(
            f"model_dir {disk / 'run'} has no room for a checkpoint (about "
        )
        assert str(info.value).endswith(" MiB): No space left on device")
        assert trainer.global_step == 0
        assert list((disk / "run").iterdir()) == []


def test_i06_a_read_only_model_dir_is_refused_before_training(tmp_path):
    with tmpfs(tmp_path, "1m") as disk:
        (disk / "run").mkdir()
        remount = ["mount", "-o", "remount,ro", str(disk)]
        assert subprocess.run(remount, capture_output=True, check=False).returncode == 0
        trainer = _trainer(disk, loop={"max_steps": 5})
        with pytest.raises(TrainingError) as info:
            trainer.fit(_data())
        assert str(info.value) == (
            f"model_dir {disk / 'run'} cannot be written: Read-only file system"
        )
        assert trainer.global_step == 0


def test_i07_a_disk_that_fills_during_the_run_stops_it_keeping_the_last_checkpoint(tmp_path):
    with tmpfs(tmp_path, "512k") as disk:

        class FillDisk:
            def on_train_step_end(self, trainer: Trainer, metrics: object) -> None:
                if trainer.global_step == 6:
                    with contextlib.suppress(OSError), (disk / "filler").open("wb") as handle:
                        while True:
                            handle.write(b"\0" * 4096)
                            handle.flush()

        trainer = _trainer(disk, callbacks=[FillDisk()])
        with pytest.raises(CheckpointError) as info:
            trainer.fit(_data())
        path = disk / "run/checkpoint_10.mdl"
        assert str(info.value).startswith(f"{path}: cannot be written (")
        assert "No space left on device" in str(info.value)
        assert str(info.value).endswith("; the previous checkpoints are kept")
        assert sorted(p.name for p in (disk / "run").glob("*.mdl")) == ["checkpoint_5.mdl"]
        assert not list((disk / "run").glob(".checkpoint_*"))
        assert load_checkpoint(disk / "run/checkpoint_5.mdl")["global_step"] == 5


# -- non-finite losses ---------------------------------------------------------------------------


def _nan_on(steps: set[int]) -> object:
    calls = {"n": 0}

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = torch.nn.functional.cross_entropy(outputs, targets)
        return value * math.nan if calls["n"] in steps else value

    return loss


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf])
def test_i08_a_non_finite_loss_stops_at_that_step_keeping_the_last_good_checkpoint(
    poison, tmp_path
):
    calls = {"n": 0}

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = torch.nn.functional.cross_entropy(outputs, targets)
        return value * 0 + poison if calls["n"] == 8 else value

    trainer = _trainer(tmp_path, loss_fn=loss)
    with pytest.raises(TrainingError) as info:
        trainer.fit(_data())
    kept = tmp_path / "run/checkpoint_5.mdl"
    assert str(info.value) == (
        f"the loss is {poison} at step 8; training stopped; the last good checkpoint is {kept} "
        "(loop.nan_policy: skip_step drops such steps instead)"
    )
    assert trainer.global_step == 7
    assert find_latest(tmp_path / "run") == kept
    assert load_checkpoint(kept)["global_step"] == 5


def test_i08_nan_policy_skip_step_drops_the_update_and_goes_on(tmp_path, caplog):
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    logged: dict[int, dict[str, float]] = {}

    class Snapshot:
        def on_train_step_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
            snapshots[trainer.global_step] = {
                k: v.clone() for k, v in trainer.model.state_dict().items()
            }
            logged[trainer.global_step] = metrics

    trainer = _trainer(
        tmp_path,
        loss_fn=_nan_on({3, 4}),
        callbacks=[Snapshot()],
        loop={"max_steps": 10, "nan_policy": "skip_step"},
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        trainer.fit(_data())
    assert trainer.global_step == 10
    assert_bit_identical(snapshots[2], snapshots[3])
    assert_bit_identical(snapshots[2], snapshots[4])
    assert not torch.equal(snapshots[4]["fc1.weight"], snapshots[5]["fc1.weight"])
    assert all(torch.isfinite(v).all() for v in trainer.model.state_dict().values())
    assert math.isnan(logged[3]["loss"])
    assert logged[3]["skipped_steps"] == 1
    assert "skipped_steps" not in logged[5]
    assert [r.getMessage() for r in caplog.records] == [
        "step 3: the loss is nan; its update was skipped (nan_policy: skip_step)",
        "step 4: the loss is nan; its update was skipped (nan_policy: skip_step)",
    ]


def test_i08_an_unknown_nan_policy_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"loop\.nan_policy: must be one of 'stop', 'skip_step'"):
        _trainer(tmp_path, loop={"max_steps": 3, "nan_policy": "ignore"})


@pytest.mark.slow
def test_i08_a_diverging_run_file_stops_with_a_clear_message(tmp_path):
    run = write_run(tmp_path, steps=50, every=1, lr="1.0e+30")
    outcome = fit(run)
    assert outcome.status == 1, outcome
    assert "Traceback" not in outcome.err
    last = outcome.err.strip().splitlines()[-1]
    assert last.startswith("plugtrain: error: the loss is "), last
    assert "; training stopped; the last good checkpoint is " in last
    kept = Path(last.split("the last good checkpoint is ")[1].split(" (")[0])
    assert load_checkpoint(kept)["global_step"] >= 1
