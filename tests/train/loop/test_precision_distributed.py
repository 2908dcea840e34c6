"""Gradient clipping under data parallel, for real: two CPU processes over gloo (torchrun).

Under DDP the gradients are averaged over the processes when ``backward`` returns, so the norm
that ``max_gradient_norm`` clips to is the global one: the same on both ranks, and the norm one
process gets from the union of both ranks' batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import plugtrain

pytestmark = pytest.mark.slow

STEPS, BATCH, ACCUM, MAX_NORM = 4, 4, 2, 0.05

SCRIPT = f"""\
import json
import os
import sys

import torch

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.train.trainer import Trainer


class NormRecorder:
    def __init__(self):
        self.norms = []

    def on_before_optimizer_step(self, trainer, optimizer):
        self.norms.append(trainer.precision.last_grad_norm)


recorder = NormRecorder()
sgd = plugtrain.resolve("optimizer", "SGD")
model_dir = sys.argv[1]
trainer = Trainer(
    device="CPU",
    model_dir=model_dir,
    seed=11,
    model=lambda: MLP(in_features=16, hidden=32, out_features=4),
    optimizer=lambda model: sgd(model.parameters(), lr=0.2, momentum=0.9),
    loop={{"max_steps": {STEPS}, "grad_accum_steps": {ACCUM}}},
    logging={{"log_steps": 1}},
    precision={{"enabled": False, "max_gradient_norm": {MAX_NORM}}},
    callbacks=[recorder],
)
data = synthetic_loader(
    batch_size={BATCH}, num_examples=64, in_features=16, num_classes=4, shuffle=False
)
trainer.fit(data)
rank = os.environ["RANK"]
with open(os.path.join(model_dir, f"norms_rank{{rank}}.json"), "w") as out:
    json.dump(recorder.norms, out)
weights = [p.detach().clone() for p in trainer.model.module.parameters()]
torch.save(weights, os.path.join(model_dir, f"weights_rank{{rank}}.pt"))
"""


def _reference() -> tuple[list[float], list[torch.Tensor]]:
    """One process, each micro-batch the union of both ranks' micro-batches."""
    from plugtrain.builtin.data import synthetic_loader
    from plugtrain.builtin.models import MLP
    from plugtrain.train.data import seed_everything

    seed_everything(11)
    model = MLP(in_features=16, hidden=32, out_features=4)
    optimizer = plugtrain.resolve("optimizer", "SGD")(model.parameters(), lr=0.2, momentum=0.9)
    data = synthetic_loader(
        batch_size=BATCH, num_examples=64, in_features=16, num_classes=4, shuffle=False
    )
    inputs, labels = data.dataset.tensors
    shards = [torch.arange(64)[rank::2] for rank in range(2)]  # DistributedSampler, no shuffle
    norms = []
    for step in range(STEPS):
        optimizer.zero_grad()
        for micro in range(ACCUM):
            start = (step * ACCUM + micro) * BATCH
            rows = torch.cat([shard[start : start + BATCH] for shard in shards])
            loss = torch.nn.functional.cross_entropy(model(inputs[rows]), labels[rows])
            (loss / ACCUM).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), MAX_NORM)))
        optimizer.step()
    return norms, [p.detach() for p in model.parameters()]


def test_clipping_under_ddp_uses_the_global_norm_on_every_rank(tmp_path):
    script = tmp_path / "clip_ddp.py"
    script.write_text(SCRIPT)
    model_dir = tmp_path / "model"
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*torchrun, "--nproc-per-node=2", str(script), str(model_dir)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((model_dir / f"norms_rank{r}.json").read_text()) for r in range(2)]
    assert len(ranks[0]) == STEPS
    assert ranks[0] == ranks[1]  # bit-identical on both ranks
    expected_norms, expected_weights = _reference()
    assert min(expected_norms) > MAX_NORM  # clipping is active at every step
    torch.testing.assert_close(ranks[0], expected_norms, rtol=1e-5, atol=0)
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    logged = [json.loads(line)["grad_norm"] for line in lines]
    assert logged == ranks[0]
    weights = [torch.load(model_dir / f"weights_rank{r}.pt") for r in range(2)]
    for mine, theirs, expected in zip(*weights, expected_weights, strict=True):
        assert torch.equal(mine, theirs)
        torch.testing.assert_close(mine, expected, rtol=1e-5, atol=1e-6)
