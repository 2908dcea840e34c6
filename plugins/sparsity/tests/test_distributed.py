"""Two real gloo processes (torchrun) keep identical masks: random init, regrowth, gradients.

Each rank trains on its own shard of the data (two micro-batches per step), so RigL's unmasked
gradients differ between the ranks until the core sums them; SET's random regrowth draws from the
core's seeded generator.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from plugtrain.testing import run_plugtrain, write_run_file

pytestmark = pytest.mark.slow

SCRIPT = """\
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from plugtrain.train.trainer import Trainer

generator = torch.Generator().manual_seed(5)
inputs = torch.randn(64, 8, generator=generator)
targets = torch.randint(0, 4, (64,), generator=generator)
loader = DataLoader(TensorDataset(inputs, targets), batch_size=4)
trainer = Trainer(
    backend={"backend_type": "CPU", "num_processes": 2, "dist_timeout": 60},
    model_dir=sys.argv[1],
    model=lambda: torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ),
    optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.05),
    loop={"max_steps": 6, "grad_accum_steps": 2},
    seed=3,
    sparsity=[
        {"algorithm": "rigl", "sparsity": 0.75, "param_filter": "0.weight", "drop_fraction": 0.5},
        {"algorithm": "set", "sparsity": 0.5, "drop_fraction": 0.5},
    ],
)
initial = {}


class Keep:
    def on_fit_start(self, t):
        initial.update({p.name: p.mask.clone() for p in t.sparsity.parameters})


trainer.callbacks.append(Keep())
trainer.callbacks_dispatch = type(trainer.callbacks_dispatch)(trainer.callbacks)
trainer.fit(loader)
rank = os.environ["RANK"]
masks = {p.name: p.mask.clone() for p in trainer.sparsity.parameters}
torch.save(
    {"initial": initial, "final": masks, "weights": trainer.model.module.state_dict()},
    os.path.join(sys.argv[2], f"rank{rank}.pt"),
)
trainer.backend.close()
"""


def test_two_processes_keep_identical_masks(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        [*command, str(script), str(tmp_path / "model"), str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    zero = torch.load(out / "rank0.pt", weights_only=True)
    one = torch.load(out / "rank1.pt", weights_only=True)
    for key in ("initial", "final", "weights"):
        assert zero[key].keys() == one[key].keys()
        for name in zero[key]:
            assert torch.equal(zero[key][name], one[key][name]), (key, name)
    for name in zero["final"]:
        assert not torch.equal(zero["initial"][name], zero["final"][name]), name
    assert int(zero["final"]["0.weight"].sum()) == 32


PLUGIN = '''\
"""A local plugin: a callback saving each rank's masks at the end of the fit."""

import os

import attrs
import torch

from plugtrain import hookimpl


@attrs.frozen
class NoArgs:
    """No arguments."""


class SaveMasks:
    def on_fit_end(self, trainer):
        masks = {p.name: p.mask.clone() for p in trainer.sparsity.parameters}
        path = os.path.join(os.environ["MASK_DIR"], f"rank{os.environ['RANK']}.pt")
        torch.save(masks, path)


@hookimpl
def plugtrain_register_callbacks(registry):
    registry.register("SaveMasks", "maskplugin:SaveMasks", schema=NoArgs)
'''

RUN = """\
plugins: [maskplugin]
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2, dist_timeout: 60}}
    model_dir: {model_dir}
    seed: 1
    model: {{MLP: {{in_features: 8, hidden: 16, out_features: 3}}}}
    optimizer: {{AdamW: {{lr: 0.05}}}}
    loop: {{max_steps: 4}}
    callbacks: [{{SaveMasks: {{}}}}]
    sparsity:
      - {{algorithm: rigl, sparsity: 0.75, param_filter: fc1.weight, drop_fraction: 0.5}}
      - {{algorithm: set, sparsity: 0.5, drop_fraction: 0.5}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 4, num_examples: 64, in_features: 8, num_classes: 3}}
"""


def test_a_run_file_on_two_processes_keeps_identical_masks(tmp_path):
    (tmp_path / "maskplugin.py").write_text(PLUGIN)
    masks = tmp_path / "masks"
    masks.mkdir()
    run = write_run_file(tmp_path, RUN.format(model_dir=tmp_path / "model"))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(
        MASK_DIR=str(masks), PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    )
    done = run_plugtrain("fit", run, subprocess_run=True, cwd=tmp_path, env=env, timeout=300)
    assert done.status == 0, done.err[-3000:]
    zero = torch.load(masks / "rank0.pt", weights_only=True)
    one = torch.load(masks / "rank1.pt", weights_only=True)
    assert sorted(zero) == ["fc1.weight", "fc2.weight"]
    for name in zero:
        assert torch.equal(zero[name], one[name]), name
    assert int(zero["fc1.weight"].sum()) == 32  # trunc(0.25 * 128)
