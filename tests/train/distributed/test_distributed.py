"""Data parallel for real: two CPU processes over gloo, started by torchrun.

Each run loads a small local plugin (a test double) that registers ``RecordingSGD``: the
plugin's SGD, saving its parameters after every step (and, when asked, killing or hanging one
rank); it also records which rank writes each checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from support.paths import REPO
from support.plans import trainer_plans

import plugtrain
from plugtrain.launching import LaunchedProcess, launched_process
from plugtrain.launching.run_file import processes_wanted

ROOT = REPO

RECORDER = '''\
"""Test double: an SGD that saves its parameters after each step; a checkpoint-writer spy."""

import atexit
import os
import signal
import time

import attrs
import torch

import plugtrain
from plugtrain import hookimpl
from plugtrain.train.checkpointing.storage import archive as checkpoint
from plugtrain.schema import arg

RECORD_DIR = os.environ["RECORD_DIR"]
RANK = os.environ.get("RANK", "alone")


@attrs.frozen
class RecordingSGDArgs:
    """SGD that records its parameters after each step."""

    lr: float = arg(help="learning rate")
    momentum: float = arg(0.0, help="momentum")


def recording_sgd(params, lr, momentum=0.0):
    optimizer = plugtrain.resolve("optimizer", "SGD")(params, lr=lr, momentum=momentum)
    step = optimizer.step
    count = [0]

    def recorded_step(*args, **kwargs):
        result = step(*args, **kwargs)
        count[0] += 1
        weights = [p.detach().clone() for g in optimizer.param_groups for p in g["params"]]
        torch.save(weights, os.path.join(RECORD_DIR, f"rank{RANK}_step{count[0]}.pt"))
        if os.environ.get("STOP_RANK") == RANK and count[0] == int(os.environ["STOP_STEP"]):
            if os.environ["STOP_MODE"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            # Hang, but end at the SIGTERM torchrun sends once rank 0 has failed: fit's stop
            # handler would only note it, and torchrun would SIGKILL this rank 30 s later.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            time.sleep(600)
        return result

    optimizer.step = recorded_step
    return optimizer


_save = checkpoint.save_checkpoint


def spy_save_checkpoint(path, state):
    with open(os.path.join(RECORD_DIR, "writers.txt"), "a") as out:
        out.write(f"{RANK} {os.path.basename(path)}\\n")
    return _save(path, state)


checkpoint.save_checkpoint = spy_save_checkpoint


def record_exit():
    with open(os.path.join(RECORD_DIR, f"atexit_rank{RANK}.txt"), "w") as out:
        out.write("ran\\n")


atexit.register(record_exit)  # must run in every worker, exit workaround or not


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("RecordingSGD", "recorder:recording_sgd", schema=RecordingSGDArgs)
'''

RUN = """\
plugins: [recorder]
trainer:
  init:
    {backend}
    model_dir: {model_dir}
    seed: 11
    model:
      MLP: {{in_features: 16, hidden: 32, out_features: 4}}
    optimizer:
      RecordingSGD: {{lr: 0.2, momentum: 0.9, exclude_from_weight_decay: false}}
    loop: {{max_steps: {steps}, eval_frequency: 3}}
    checkpoint: {{steps: 3}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: {batch}, num_examples: 64, in_features: 16, num_classes: 4,
                   shuffle: false}}
    val_dataloader:
      Synthetic: {{batch_size: 10, num_examples: 64, in_features: 16, num_classes: 4,
                   split: val}}
"""

STEPS = 6
BATCH = 4  # per process


def _setup(tmp_path: Path, backend: str) -> Path:
    (tmp_path / "recorder.py").write_text(RECORDER)
    (tmp_path / "records").mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(
        RUN.format(backend=backend, model_dir=tmp_path / "model", steps=STEPS, batch=BATCH)
    )
    return run


def _run(tmp_path: Path, command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    environ.update(env)
    environ["RECORD_DIR"] = str(tmp_path / "records")
    environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=180,
        check=False,
    )


def _reference_weights() -> list[list[torch.Tensor]]:
    """One process taking, at each step, the union of both ranks' batches (2 x BATCH)."""
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.builtin.models import MLP
    from plugtrain.train.trainer import seed_everything

    seed_everything(11)
    model = MLP(in_features=16, hidden=32, out_features=4)
    optimizer = plugtrain.resolve("optimizer", "SGD")(model.parameters(), lr=0.2, momentum=0.9)
    data = synthetic_loader(
        batch_size=BATCH, num_examples=64, in_features=16, num_classes=4, shuffle=False
    )
    inputs, labels = data.dataset.tensors
    weights = []
    for step in range(STEPS):
        # the global sample order, no shuffle: step s takes rows [s*G, (s+1)*G), G = 2 x BATCH
        rows = torch.arange(step * 2 * BATCH, (step + 1) * 2 * BATCH)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs[rows]), labels[rows]).backward()
        optimizer.step()
        weights.append([p.detach().clone() for p in model.parameters()])
    return weights


def _assert_data_parallel_run(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    records = tmp_path / "records"
    reference = _reference_weights()
    for step in range(1, STEPS + 1):
        ranks = [torch.load(records / f"rank{r}_step{step}.pt") for r in range(2)]
        for mine, theirs, expected in zip(*ranks, reference[step - 1], strict=True):
            assert torch.equal(mine, theirs), f"ranks differ after step {step}"
            torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-6)
    writers = (records / "writers.txt").read_text().split("\n")[:-1]
    assert writers == ["0 checkpoint_3.mdl", "0 checkpoint_6.mdl"]
    assert sorted(p.name for p in (tmp_path / "model").glob("*.mdl")) == [
        "checkpoint_3.mdl",
        "checkpoint_6.mdl",
    ]
    text = (tmp_path / "model" / "metrics.jsonl").read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert [r["step"] for r in lines if r["split"] == "train"] == list(range(1, STEPS + 1))
    assert [r["step"] for r in lines if r["split"] == "val"] == [3, 6]
    assert done.stdout.count("trainer 0: validation") == 1
    # torch 2.13 and later: the gloo workers end right after their atexit handlers ran.
    for rank in range(2):
        assert (records / f"atexit_rank{rank}.txt").exists(), f"rank {rank}: atexit did not run"


pytestmark = pytest.mark.slow


def test_plugtrain_fit_launches_two_gloo_processes_that_match_one_process(tmp_path):
    run = _setup(tmp_path, "backend: {backend_type: CPU, num_processes: 2, dist_timeout: 30}")
    done = _run(tmp_path, ["-m", "plugtrain", "fit", str(run)])
    assert "starting 2 processes with torchrun" in done.stderr
    _assert_data_parallel_run(tmp_path, done)


def test_launched_workers_run_their_atexit_handlers_with_the_exit_workaround_switched_off(
    tmp_path,
):
    run = _setup(tmp_path, "backend: {backend_type: CPU, num_processes: 2, dist_timeout: 30}")
    done = _run(tmp_path, ["-m", "plugtrain", "fit", str(run)], PLUGTRAIN_GLOO_EXIT_WORKAROUND="0")
    _assert_data_parallel_run(tmp_path, done)


def test_the_same_run_file_under_an_outside_torchrun_is_not_launched_again(tmp_path):
    run = _setup(tmp_path, "device: CPU")
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = _run(tmp_path, [*torchrun, "-m", "plugtrain", "fit", str(run)])
    assert "starting 2 processes" not in done.stderr
    _assert_data_parallel_run(tmp_path, done)


def test_a_killed_rank_fails_the_run_with_a_clear_message(tmp_path):
    run = _setup(tmp_path, "backend: {backend_type: CPU, num_processes: 2, dist_timeout: 20}")
    done = _run(
        tmp_path,
        ["-m", "plugtrain", "fit", str(run)],
        STOP_RANK="1",
        STOP_STEP="2",
        STOP_MODE="kill",
    )
    assert done.returncode == 1
    assert "plugtrain: error: the data-parallel run of 2 processes failed: " in done.stderr
    assert "rank 1 (pid " in done.stderr
    assert "was killed by signal SIGKILL" in done.stderr
    # Which rank torchrun records first is a race: rank 0 may see the broken connection before
    # rank 1's death is noticed, so only require that one failure is marked as the first.
    assert "(first failure)" in done.stderr


def test_a_hung_rank_fails_the_run_after_the_timeout_with_a_clear_message(tmp_path):
    run = _setup(tmp_path, "backend: {backend_type: CPU, num_processes: 2, dist_timeout: 5}")
    done = _run(
        tmp_path,
        ["-m", "plugtrain", "fit", str(run)],
        STOP_RANK="1",
        STOP_STEP="2",
        STOP_MODE="hang",
    )
    assert done.returncode == 1
    assert (
        "plugtrain: error: rank 0 of 2: a collective operation failed because another process"
        in done.stderr
    )
    assert "Timed out" in done.stderr
    assert "rank 0 (pid " in done.stderr
    assert "(first failure)" in done.stderr
    assert "was killed by signal SIGTERM (stopped by torchrun after the first failure)" in (
        done.stderr
    )


# -- launch helpers (in process) -------------------------------------------------------------


def test_launched_process_reads_torchruns_variables():
    assert launched_process({}) is None
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert launched_process(env) == LaunchedProcess(rank=3, local_rank=1, world_size=4)
    with pytest.raises(plugtrain.BackendError, match="must be integers"):
        launched_process({"RANK": "x", "WORLD_SIZE": "2"})


@pytest.fixture
def installed_plugins():
    """The process-wide registry as users get it (earlier tests may have changed it)."""
    from plugtrain.discovery import loading as plugins

    settings, extra = plugins.current_settings(), plugins.current_extra()
    plugins.reset()
    yield
    plugins.reset(settings, extra=extra)


@pytest.mark.usefixtures("installed_plugins")
def test_trainers_of_one_file_must_agree_on_the_process_count(tmp_path):
    body = textwrap.dedent(
        """\
        - trainer:
            init:
              backend: {backend_type: CPU, num_processes: N}
              model: {MLP: {in_features: 64, out_features: 10}}
            validate: {val_dataloader: {Digits: {batch_size: 64}}}
        """
    )
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n" + textwrap.indent(body.replace("N", "2"), "  "))
    assert processes_wanted(trainer_plans(path), plugtrain.get_registry()) == 2
    path.write_text(
        "trainer:\n"
        + textwrap.indent(body.replace("N", "2"), "  ")
        + textwrap.indent(body.replace("N", "3"), "  ")
    )
    with pytest.raises(plugtrain.ConfigError, match="the same number of processes"):
        processes_wanted(trainer_plans(path), plugtrain.get_registry())
