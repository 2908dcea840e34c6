"""Preemption signals: SIGTERM and SIGHUP stop ``fit`` like SIGINT, in one process and in two.

What cluster schedulers send before they kill a job (SIGTERM) and what a closed terminal sends
(SIGHUP) finish the step, save it and exit ``128 + signal`` (143, 129) with a message; the run
resumes bit for bit. A two-process run started by ``plugtrain fit`` (torchrun) forwards them to
its workers, whichever processes received them, and the whole run saves once and stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from support.reliability import (
    Outcome,
    finish_process,
    last_line,
    run_cli,
    small_data,
    small_trainer,
    start_plugtrain,
    wait_until,
    write_train_run,
)

from plugtrain.train.checkpointing.storage.archive import find_latest, load_checkpoint
from plugtrain.train.distributed.signals import StoppedAtOnce, TrainingInterrupted
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend", "default_stop_signals")


@pytest.fixture
def default_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP at their default disposition, as these tests expect, then as they were.

    A disposition is inherited: under ``nohup`` SIGHUP arrives ignored, in this process and in
    the processes it starts, and an ignored SIGHUP is meant to stay ignored.
    """
    previous = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _trainer(tmp_path: Path, **changes: object) -> Trainer:
    return small_trainer(tmp_path / "run", **changes)


def _data() -> torch.utils.data.DataLoader:
    return small_data()


class SignalAt:
    """A callback sending this process ``signum`` ``times`` times at the end of step ``step``."""

    def __init__(self, signum: int, step: int, times: int = 1) -> None:
        self.signum, self.step, self.times = signum, step, times

    def on_train_step_end(self, trainer: Trainer, metrics: object) -> None:
        if trainer.global_step == self.step:
            for _ in range(self.times):
                signal.raise_signal(self.signum)


def _same_weights(a: Path, b: Path) -> None:
    left, right = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert left.keys() == right.keys()
    for name, value in left.items():
        assert torch.equal(value, right[name]), name


# -- one process ---------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_i09_sigterm_and_sighup_in_fit_save_the_step_and_restore_the_handlers(signum, tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    trainer = _trainer(tmp_path, callbacks=[SignalAt(signum, 7)])
    with pytest.raises(TrainingInterrupted) as info:
        trainer.fit(_data())
    saved = tmp_path / "run/checkpoint_7.mdl"
    name = signal.Signals(signum).name
    assert str(info.value) == (
        f"interrupted by {name} at step 7; checkpoint saved to {saved}; "
        "run the same command again to resume"
    )
    assert info.value.exit_status == 128 + signum
    assert load_checkpoint(saved)["global_step"] == 7
    assert {s: signal.getsignal(s) for s in before} == before


def test_i09_a_second_sigterm_stops_at_once_without_saving(tmp_path):
    trainer = _trainer(tmp_path, callbacks=[SignalAt(signal.SIGTERM, 7, times=2)])
    with pytest.raises(StoppedAtOnce) as info:
        trainer.fit(_data())
    assert str(info.value) == "SIGTERM again: stopped at once, without saving the current step"
    assert info.value.exit_status == 143
    assert find_latest(tmp_path / "run") == tmp_path / "run/checkpoint_5.mdl"


def test_i09_an_ignored_sighup_stays_ignored(tmp_path):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        trainer = _trainer(tmp_path, callbacks=[SignalAt(signal.SIGHUP, 7)])
        trainer.fit(_data())  # as under nohup: the hang-up changes nothing
        assert trainer.global_step == 20
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


STEPS, EVERY = 200, 10


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The final checkpoint of the run the signalled runs are compared with (run once, in this
    process: only the signalled runs and their resumes need processes of their own)."""
    from plugtrain.bases.backend import release_backend_type

    folder = tmp_path_factory.mktemp("straight")
    release_backend_type()
    try:
        done = run_cli("fit", str(write_train_run(folder, steps=STEPS, every=EVERY)))
    finally:
        release_backend_type()
    assert done.status == 0, done.err
    return folder / "model" / f"checkpoint_{STEPS}.mdl"


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_i09_a_signal_to_plugtrain_fit_exits_128_plus_it_and_resumes_bit_for_bit(
    signum, tmp_path, uninterrupted
):
    steps, every = STEPS, EVERY
    cut = write_train_run(tmp_path / "cut", steps=steps, every=every)
    process = start_plugtrain("fit", str(cut))
    wait_until((tmp_path / "cut/model/checkpoint_20.mdl").exists, process)
    process.send_signal(signum)
    outcome = finish_process(process)
    assert outcome.status == 128 + signum, outcome.err
    assert "Traceback" not in outcome.err
    name = signal.Signals(signum).name
    prefix = f"plugtrain: interrupted by {name} at step "
    last = last_line(outcome.err)
    assert last.startswith(prefix), last
    step = int(last[len(prefix) :].split(";")[0])
    saved = tmp_path / "cut/model" / f"checkpoint_{step}.mdl"
    resume = "run the same command again to resume"
    assert last == f"{prefix}{step}; checkpoint saved to {saved}; {resume}"
    assert load_checkpoint(saved)["global_step"] == step

    resumed = finish_process(start_plugtrain("fit", str(cut)))
    assert resumed.status == 0, resumed.err
    assert f"resumed from {saved} at step {step}" in resumed.err
    _same_weights(uninterrupted, tmp_path / "cut/model" / f"checkpoint_{steps}.mdl")


# -- two processes under the launcher ----------------------------------------------------------

SPY = '''\
"""Test double: records each process's pid and which rank writes which checkpoint."""

import os

from plugtrain.train.checkpointing.storage import archive as checkpoint

RECORD_DIR = os.environ["RECORD_DIR"]
RANK = os.environ.get("RANK", "launcher")
with open(os.path.join(RECORD_DIR, f"pid_{RANK}"), "w") as out:
    out.write(str(os.getpid()))

_save = checkpoint.save_checkpoint


def spy_save_checkpoint(path, state):
    with open(os.path.join(RECORD_DIR, "writers.txt"), "a") as out:
        out.write(f"{RANK} {os.path.basename(path)}\\n")
    return _save(path, state)


checkpoint.save_checkpoint = spy_save_checkpoint
'''

TWO = "backend: {backend_type: CPU, num_processes: 2, dist_timeout: 60}"


def _two_process_fit(folder: Path, *overrides: str) -> subprocess.Popen[str]:
    records = folder / "records"
    records.mkdir(parents=True, exist_ok=True)
    (folder / "spy.py").write_text(SPY)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    path = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
    env.update(RECORD_DIR=str(records), PYTHONPATH=path)
    args = [arg for override in overrides for arg in ("--set", override)]
    return start_plugtrain("fit", str(folder / "run.yaml"), *args, env=env, cwd=folder)


def _pid_text(folder: Path, rank: str) -> str:
    """The pid a worker wrote, or "" while the file is missing or not yet written."""
    path = folder / "records" / f"pid_{rank}"
    return path.read_text().strip() if path.exists() else ""


def _pid(folder: Path, rank: str) -> int:
    return int(_pid_text(folder, rank))


def _targets(folder: Path, process: subprocess.Popen[str], whom: str) -> list[int]:
    def workers_started() -> bool:  # a file can exist before its pid is written
        return all(_pid_text(folder, r).isdigit() for r in ("0", "1"))

    wait_until(workers_started, process)
    workers = [_pid(folder, "0"), _pid(folder, "1")]
    return {"launcher": [process.pid], "workers": workers, "all": [process.pid, *workers]}[whom]


def _writers(folder: Path) -> list[str]:
    return (folder / "records/writers.txt").read_text().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("whom", ["launcher", "workers", "all"])
def test_i10_sigterm_to_a_two_process_run_saves_once_and_stops(whom, tmp_path):
    # Far more steps than it takes to reach checkpoint 10: the signal comes mid-run.
    cut = tmp_path / "cut"
    write_train_run(cut, steps=100_000, every=10, backend=TWO, plugins=["spy"])
    process = _two_process_fit(cut)
    targets = _targets(cut, process, whom)
    wait_until((cut / "model/checkpoint_10.mdl").exists, process)
    for pid in targets:
        os.kill(pid, signal.SIGTERM)
    outcome: Outcome = finish_process(process)

    assert outcome.status == 143, outcome.err[-3000:]
    assert "internal error" not in outcome.err
    assert "SignalException" not in outcome.err
    assert "Traceback" not in outcome.err
    saved = [line for line in outcome.err.splitlines() if " at step " in line]
    assert len(saved) == 1, outcome.err[-3000:]  # rank 0 says where it saved; rank 1 is quiet
    prefix = "plugtrain: interrupted by SIGTERM at step "
    assert saved[0].startswith(prefix), saved
    step = int(saved[0][len(prefix) :].split(";")[0])
    checkpoint = cut / "model" / f"checkpoint_{step}.mdl"
    assert load_checkpoint(checkpoint)["global_step"] == step
    assert find_latest(cut / "model") == checkpoint
    assert last_line(outcome.err) == (
        "plugtrain: interrupted by SIGTERM: the 2 processes "
        f"were asked to save their step and stop; the newest checkpoint is {checkpoint}; "
        "run the same command again to resume"
    )
    # Saved once, by rank 0, at the step the ranks agreed on.
    written = _writers(cut)
    assert written.count(f"0 checkpoint_{step}.mdl") == 1
    assert all(line.startswith("0 ") for line in written)
    assert written[-1] == f"0 checkpoint_{step}.mdl"

    if whom != "launcher":
        return
    # The interrupted run resumes exactly: the same weights as one that never stopped.
    end = step + 5
    resumed = finish_process(_two_process_fit(cut, f"trainer.init.loop.max_steps={end}"))
    assert resumed.status == 0, resumed.err[-3000:]
    assert f"resumed from {checkpoint} at step {step}" in resumed.err
    straight = tmp_path / "straight"
    write_train_run(straight, steps=end, every=10, backend=TWO, plugins=["spy"])
    done = finish_process(_two_process_fit(straight))
    assert done.status == 0, done.err[-3000:]
    name = f"checkpoint_{end}.mdl"
    _same_weights(straight / "model" / name, cut / "model" / name)
