"""A real 2-process gloo run reading GptHDF5MapDataProcessor: the ranks see disjoint rows.

``plugtrain preprocess`` writes the stdlib corpus; ``plugtrain fit`` starts two CPU processes
(torchrun) on a run file in Model Zoo's data spelling. A local plugin model records the batch
each rank trains on at each step, and each batch it evaluates (the data is what is tested, not
the model): training takes each rank's rows of every global batch, evaluation deals the
GptHDF5DataProcessor's batches out whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from plugtrain.cli import main
from plugtrain.testing import run_plugtrain, write_run_file
from plugtrain_models.data.order import MapOrder

RECORDER = '''\
"""Test double: a model that saves the input_ids of every batch it trains on."""

import os

import attrs
import torch

from plugtrain import hookimpl

RECORD_DIR = os.environ["RECORD_DIR"]


@attrs.frozen
class BatchRecorderArgs:
    """A one-parameter model that records its batches."""


class BatchRecorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))
        self.calls = 0

    def forward(self, batch):
        self.calls += 1
        kind = "step" if self.training else "eval"
        name = f"rank{os.environ['RANK']}_{kind}{self.calls}.pt"
        torch.save(batch, os.path.join(RECORD_DIR, name))
        loss = (self.weight * batch["input_ids"].float()).mean() / 256
        return {"loss": loss, "num_examples": int(batch["attention_mask"].sum())}


@hookimpl
def plugtrain_register_models(registry):
    registry.register("BatchRecorder", "recorder:BatchRecorder", schema=BatchRecorderArgs)
'''

RUN = """\
plugins: [recorder]
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2, dist_timeout: 60}}
    model_dir: {model_dir}
    seed: 1
    model:
      BatchRecorder: {{}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: {steps}, eval_frequency: {steps}}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader:
      data_processor: GptHDF5MapDataProcessor
      data_dir: {data_dir}
      batch_size: 4
      shuffle: true
      shuffle_seed: 3
      num_workers: 0
    val_dataloader:
      data_processor: GptHDF5DataProcessor
      data_dir: {data_dir}
      batch_size: 4
      shuffle: false
"""

STEPS = 4

pytestmark = pytest.mark.slow


def test_two_gloo_ranks_train_on_disjoint_rows_of_each_global_batch(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    arguments = ["stdlib", "--stdlib-corpus", "1200", "--max-seq-length", "8"]
    assert main(["preprocess", *arguments, "--samples-per-file", "40", "-o", str(data_dir)]) == 0
    (tmp_path / "recorder.py").write_text(RECORDER)
    (tmp_path / "records").mkdir()
    run = write_run_file(
        tmp_path, RUN.format(model_dir=tmp_path / "model", steps=STEPS, data_dir=data_dir)
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    environ["RECORD_DIR"] = str(tmp_path / "records")
    environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), environ.get("PYTHONPATH", "")])
    done = run_plugtrain("fit", run, subprocess_run=True, cwd=tmp_path, env=environ, timeout=180)
    assert done.status == 0, done.err[-3000:]

    files = sorted(data_dir.glob("*.h5"))
    assert len(files) > 2
    samples = []
    for path in files:
        with h5py.File(path, "r") as file:
            samples.append(file["data"][:])
    data = torch.from_numpy(np.concatenate(samples))
    global_batches = MapOrder(range(len(data)), 4, shuffle=True, shuffle_seed=3).batches(0)
    seen: list[set[int]] = [set(), set()]
    for step, indices in zip(range(1, STEPS + 1), global_batches, strict=False):
        for rank in range(2):
            batch = torch.load(tmp_path / "records" / f"rank{rank}_step{step}.pt")
            rows = indices[rank * 2 : rank * 2 + 2]
            assert torch.equal(batch["input_ids"], data[rows, 0]), f"rank {rank}, step {step}"
            assert torch.equal(batch["labels"], data[rows, 2])
            assert batch["input_ids"].dtype == torch.int32
            seen[rank].update(rows)
    assert not seen[0] & seen[1]
    assert len(seen[0]) == len(seen[1]) == 2 * STEPS

    records = tmp_path / "records"
    evaluated = []
    for rank in range(2):
        found = sorted(records.glob(f"rank{rank}_eval*.pt"), key=lambda p: int(p.stem[10:]))
        evaluated.append([torch.load(path)["input_ids"] for path in found])
    whole = [data[i : i + 4, 0] for i in range(0, len(data) - len(data) % 4, 4)]
    assert len(evaluated[0]) + len(evaluated[1]) == len(whole)
    for rank in range(2):  # batches rank, rank + 2, ... of the whole set
        for mine, expected in zip(evaluated[rank], whole[rank::2], strict=True):
            assert torch.equal(mine, expected)
