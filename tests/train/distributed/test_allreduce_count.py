"""One gradient all-reduce per bucket per optimizer step under accumulation (real processes).

A DDP communication hook, registered by a test callback on the wrapped model, counts the
buckets it reduces between optimizer steps of a two-process ``plugtrain fit`` at
``grad_accum_steps: 4`` (without ``no_sync`` each bucket would be reduced four times).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.plugtrain_cli import run_plugtrain

COUNTER = '''\
"""Test double: a callback counting DDP's gradient all-reduces per optimizer step."""

import json
import os

import attrs
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from plugtrain import hookimpl

RECORD_DIR = os.environ["RECORD_DIR"]


@attrs.frozen
class CountAllReducesArgs:
    """Counts gradient all-reduces."""


class CountAllReduces:
    def __init__(self):
        self.current = []
        self.steps = []

    def on_fit_start(self, trainer):
        def counting_hook(state, bucket):
            self.current.append(bucket.index())
            return allreduce_hook(state, bucket)

        trainer.model.register_comm_hook(None, counting_hook)

    def on_before_optimizer_step(self, trainer, optimizer):
        self.steps.append(self.current)
        self.current = []

    def on_fit_end(self, trainer):
        name = f"buckets_{os.environ['RANK']}.json"
        with open(os.path.join(RECORD_DIR, name), "w") as out:
            json.dump(self.steps, out)


@hookimpl
def plugtrain_register_callbacks(registry):
    registry.register("CountAllReduces", "counter:CountAllReduces", schema=CountAllReducesArgs)
'''

RUN = """\
plugins: [counter]
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2, dist_timeout: 30}}
    model_dir: {model_dir}
    seed: 3
    model: {{MLP: {{in_features: 16, hidden: 64, out_features: 4}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 5, grad_accum_steps: 4}}
    callbacks:
    - CountAllReduces: {{}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 4, num_examples: 256, in_features: 16, num_classes: 4}}
"""


@pytest.mark.slow
def test_each_gradient_bucket_is_all_reduced_once_per_optimizer_step(tmp_path: Path) -> None:
    (tmp_path / "counter.py").write_text(COUNTER)
    records = tmp_path / "records"
    records.mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "model"))
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    environ["RECORD_DIR"] = str(records)
    environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), environ.get("PYTHONPATH", "")])
    done = run_plugtrain("fit", str(run), cwd=tmp_path, env=environ, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in range(2):
        steps = json.loads((records / f"buckets_{rank}.json").read_text())
        assert len(steps) == 5
        buckets = {index for step in steps for index in step}
        assert buckets, "no gradient all-reduce was seen"
        for step in steps:
            assert sorted(step) == sorted(buckets), f"rank {rank}: buckets reduced {step}"
