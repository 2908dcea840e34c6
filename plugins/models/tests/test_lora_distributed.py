"""LoRA under 2-process DDP and FSDP2 (gloo): the same fit as one process, the whole adapter saved.

This file is also the worker: ``python -m torch.distributed.run --nproc-per-node 2
test_lora_distributed.py OUT`` fits a tiny Llama with LoRA from ``OUT/base.mdl`` for 4 steps
(16 samples a step in every run) with DDP into a whole checkpoint and with FSDP2, the model
built on the ``meta`` device, into an adapter-only one; the test compares both with the same fit
in one process and loads the FSDP2 adapter in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import plugtrain
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import is_adapter

pytestmark = pytest.mark.slow  # one launch of 2 real processes

KEYS = {
    "vocab_size": 128,
    "hidden_size": 64,
    "filter_size": 96,
    "num_hidden_layers": 2,
    "num_heads": 4,
    "max_position_embeddings": 64,
    "attention_module": "multiquery_attention",
    "extra_attention_params": {"num_kv_groups": 2},
    "share_embedding_weights": False,
    "dropout_rate": 0.0,
    "embedding_dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
}  # fmt: skip (no dropout: its draws differ between 1 and 2 processes)
LORA = [
    {"r": 4, "alpha": 8, "target_modules": ["MultiQueryAttention", "Linear"]},
    {"r": 2, "alpha": 2, "target_modules": ["FeedForwardNetwork"]},
    {"r": 2, "alpha": 4, "target_modules": ["Embedding"]},
]
STEPS = 4


def _loader() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 128, (64, 17), generator=generator)
    return DataLoader([{"input_ids": r[:-1], "labels": r[1:]} for r in rows], batch_size=4)


def _trainer(out: Path, name: str, parallel: str | None, adapter_only: bool) -> plugtrain.Trainer:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    backend: dict[str, Any] = {"backend_type": "CPU"}
    if parallel is not None:
        backend |= {"num_processes": world, "data_parallel": parallel}
    return plugtrain.Trainer(
        backend=backend,
        model=lambda: build_decoder("llama", KEYS),
        optimizer={"AdamW": {"lr": 0.01, "weight_decay": 0.1}},
        loop={"max_steps": STEPS, "grad_accum_steps": 4 // world},  # 16 samples a step
        checkpoint={"steps": STEPS},
        callbacks=[{"Lora": {"lora_params": LORA, "adapter_only_checkpoints": adapter_only}}],
        seed=1,
        model_dir=out / name,
    )


def _fit(out: Path, name: str, parallel: str | None, adapter_only: bool) -> Path:
    trainer = _trainer(out, name, parallel, adapter_only)
    trainer.fit(_loader(), ckpt_path=str(out / "base.mdl"))
    return trainer.checkpoint_path(STEPS)


def main() -> None:
    """The 2-process runs (see the module)."""
    out = Path(sys.argv[1])
    _fit(out, "ddp", "ddp", adapter_only=False)
    _fit(out, "fsdp2", "fsdp2", adapter_only=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base weights, the 2-process launch, and the same fit in this process."""
    out = tmp_path_factory.mktemp("lora_distributed")
    torch.manual_seed(4)
    torch.save({"model": build_decoder("llama", KEYS).state_dict()}, out / "base.mdl")
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    done = subprocess.run(
        [*command, "--nproc-per-node=2", __file__, str(out)],
        capture_output=True, text=True, env=environ, cwd=out, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    _fit(out, "alone", None, adapter_only=False)
    return out


def _model(path: Path) -> dict[str, torch.Tensor]:
    return dict(torch.load(path, weights_only=True)["model"])


@pytest.mark.parametrize("run", ["ddp", "fsdp2"])
def test_two_processes_train_the_adapters_one_process_trains(runs: Path, run: str) -> None:
    alone = _model(runs / "alone" / f"checkpoint_{STEPS}.mdl")
    saved = _model(runs / run / f"checkpoint_{STEPS}.mdl")
    adapters = {n: t for n, t in alone.items() if is_adapter(n)}
    assert len(adapters) == 2 * (2 * (4 + 2) + 2)  # attention, FFN (no GLU); both tables
    if run == "fsdp2":
        assert set(saved) == set(adapters)  # adapter-only
    else:
        assert set(saved) == set(alone)
    base = _model(runs / "base.mdl")
    for name, tensor in saved.items():
        if not is_adapter(name):
            assert torch.equal(tensor, base[name]), name
            continue
        assert tensor.shape == adapters[name].shape, name  # the whole adapter, not a shard
        # the same sums of 16 samples' gradients, added in another order across 2 processes
        torch.testing.assert_close(tensor, adapters[name], atol=2e-5, rtol=1e-4)


def test_the_fsdp2_adapter_loads_in_one_process(runs: Path) -> None:
    trainer = _trainer(runs, "reload", None, adapter_only=True)
    checkpoint = runs / "fsdp2" / f"checkpoint_{STEPS}.mdl"
    trainer.load_checkpoint(checkpoint)
    assert trainer.global_step == STEPS
    state = trainer.unwrapped_model.state_dict()
    saved, base = _model(checkpoint), _model(runs / "base.mdl")
    for name, tensor in state.items():
        assert torch.equal(tensor, saved[name] if is_adapter(name) else base[name]), name


if __name__ == "__main__":
    main()
