"""Callbacks and loggers in a real two-process gloo run: callbacks on every rank, loggers on 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.plugtrain_cli import run_plugtrain

pytestmark = pytest.mark.slow

PLUGIN = '''\
"""A local plugin: a callback and a logger that record which rank called them."""

import json
import os

import attrs

from plugtrain import hookimpl

RECORDS = os.environ["RECORD_DIR"]


def _write(name, entry):
    with open(os.path.join(RECORDS, f"{name}_rank{os.environ.get('RANK', '-')}.jsonl"), "a") as f:
        f.write(json.dumps(entry) + "\\n")


@attrs.frozen
class NoArgs:
    """No arguments."""


class RankCallback:
    def on_train_step_end(self, trainer, metrics):
        _write("callback", {"step": trainer.global_step, "main": trainer.is_main_process})


class RankLogger:
    def log_metrics(self, step, split, metrics):
        _write("logger", {"step": step, "split": split})

    def close(self):
        _write("logger", {"closed": True})


@hookimpl
def plugtrain_register_callbacks(registry):
    registry.register("RankCallback", "rankplugin:RankCallback", schema=NoArgs)


@hookimpl
def plugtrain_register_loggers(registry):
    registry.register("RankLogger", "rankplugin:RankLogger", schema=NoArgs)
'''

RUN = """\
plugins: [rankplugin]
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2, dist_timeout: 60}}
    model_dir: {model_dir}
    seed: 1
    model: {{MLP: {{in_features: 8, hidden: 8, out_features: 3}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 4}}
    logging: {{log_steps: 2}}
    callbacks: [{{RankCallback: {{}}}}]
    loggers: [{{RankLogger: {{}}}}]
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 4, num_examples: 32, in_features: 8, num_classes: 3}}
"""


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_callbacks_run_on_every_rank_and_loggers_on_the_main_one(tmp_path):
    (tmp_path / "rankplugin.py").write_text(PLUGIN)
    records = tmp_path / "records"
    records.mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "model"))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(
        RECORD_DIR=str(records),
        PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]),
    )
    done = run_plugtrain("fit", str(run), cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in records.iterdir()) == [
        "callback_rank0.jsonl",
        "callback_rank1.jsonl",
        "logger_rank0.jsonl",
    ]
    assert _lines(records / "callback_rank0.jsonl") == [
        {"step": 2, "main": True},
        {"step": 4, "main": True},
    ]
    assert _lines(records / "callback_rank1.jsonl") == [
        {"step": 2, "main": False},
        {"step": 4, "main": False},
    ]
    assert _lines(records / "logger_rank0.jsonl") == [
        {"step": 2, "split": "train"},
        {"step": 4, "split": "train"},
        {"closed": True},
    ]
