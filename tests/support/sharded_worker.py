"""The runs behind tests/train/distributed/test_sharded.py: one torchrun launch of 2 processes.

``python -m torch.distributed.run --nproc-per-node 2 tests/support/sharded_worker.py OUT`` runs
every
built-in optimizer on shards, then trains a small GPT decoder 20 steps (2 micro-batches a step,
AdamW, clipping) with DDP, with FSDP2 and DCP checkpoints, with FSDP2 into single-file
checkpoints, with HSDP (2 replicas x 1 shard), and resumes the DCP checkpoint of step 10
(saving asynchronously from there) and the file checkpoint of step 10, and trains once more
with the gathered parameters kept after forward, activation checkpointing and regional
compile; the FSDP2 runs build the model on the meta device, except the single-file one and
HSDP (built whole);
:func:`alone` (``python tests/support/sharded_worker.py OUT --alone``, or called in the test's
own process) resumes the DCP checkpoint of step 10 in one process. Each run's per-step losses,
gradient norms and local parameter+gradient+optimizer bytes go to ``OUT/<run>.rank<R>.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import plugtrain
from plugtrain.train.distributed.dtensor_state import local_tensor
from plugtrain.train.trainer import Trainer

STEPS = 20
BUILT_IN_OPTIMIZERS = (
    *("Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "ASGD", "Lamb"),
    *("Lion", "Muon", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD"),
)
BRIDGED_TORCH_OPTIMIZERS = (
    *("torch:ASGD", "torch:Adadelta", "torch:Adafactor", "torch:Adagrad", "torch:Adam"),
    *("torch:AdamW", "torch:Adamax", "torch:Muon", "torch:NAdam", "torch:RAdam"),
    *("torch:RMSprop", "torch:Rprop", "torch:SGD", "torch:SparseAdam"),
)
"""``torch.optim``'s optimizers through plugtrain-bridges (the built-ins have their names)."""


class Record:
    """Records each step's logged loss and gradient norm, and the local state bytes at step 2."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self.bytes: dict[str, int] = {}

    def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        if trainer.global_step == 1:  # the optimizer state exists after the first step
            params = [p for g in optimizer.param_groups for p in g["params"]]
            self.bytes = {
                "params": sum(local_tensor(p).nbytes for p in params),
                "grads": sum(local_tensor(p.grad).nbytes for p in params if p.grad is not None),
                "optimizer": sum(
                    local_tensor(v).nbytes
                    for s in optimizer.state.values()
                    for v in s.values()
                    if isinstance(v, torch.Tensor)
                ),
            }

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.losses.append(float(metrics["loss"]))
        self.grad_norms.append(float(metrics["grad_norm"]))


def loader() -> DataLoader:
    """64 fixed sequences of 17 bytes, in order, 4 a micro-batch."""
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 256, (64, 17), generator=generator)
    data = [{"input_ids": r[:-1], "labels": r[1:]} for r in rows]
    return DataLoader(data, batch_size=4, shuffle=False)


def gpt(init_weights: bool = True) -> Any:
    """The 34k-parameter GPT decoder (tied embeddings); optionally without ``init_weights``."""
    from plugtrain_models.gpt import GPT

    model = GPT(n_layer=2, n_head=2, n_embd=32, block_size=16)
    if not init_weights:
        model.init_weights = None  # as a model that does not declare it
    return model


def make_trainer(
    out: Path,
    name: str,
    parallel: str,
    checkpoint: dict[str, Any],
    record: Record,
    keep: int = 0,
    **options: Any,
) -> Trainer:
    """The trainer of one run: a 34k-parameter GPT, AdamW, 2 micro-batches a step.

    ``parallel`` ``hsdp`` is 2 replicas of ``WORLD_SIZE / 2`` shards (a 2-D mesh: 2 x 1 on 2
    processes, 2 x 2 on 4), its model without ``init_weights`` (built whole). ``options``:
    more backend keys, and ``activation_checkpointing``, ``compile`` and ``half``
    (``precision``'s ``fp16_type``).
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    adamw = plugtrain.resolve("optimizer", "AdamW")
    checkpointing = options.pop("activation_checkpointing", "off")
    compiled = options.pop("compile", "off")
    half = options.pop("half", None)
    return Trainer(
        backend={
            "backend_type": "CPU",
            "num_processes": world,
            "data_parallel": parallel,
            **({"dp_shard": world // 2, "dp_replicate": 2} if parallel == "hsdp" else {}),
            **options,
        },
        model=lambda: gpt(init_weights=parallel != "hsdp"),
        activation_checkpointing=checkpointing,
        compile=compiled,
        optimizer=lambda m: adamw(m.parameters(), lr=1e-2, weight_decay=0.1),
        loop={"max_steps": STEPS, "grad_accum_steps": 4 // world},  # 16 samples a step
        seed=1,
        model_dir=out / "runs" / name,
        checkpoint={"steps": 10, **checkpoint},
        precision={"enabled": half is not None, "max_gradient_norm": 1.0}
        | ({"fp16_type": half} if half else {}),
        logging={"log_steps": 1},
        callbacks=[record, *({"KeepNCheckpoints": {"n": 1}} for _ in range(keep))],
        loggers=[{"MetricsFilesLogger": None}],
    )


def run(
    out: Path,
    name: str,
    parallel: str,
    checkpoint: dict[str, Any],
    ckpt_path: Any,
    keep: int = 0,
    **options: Any,
) -> None:
    """Train (or resume) to step 20 and record the run as ``OUT/<name>.rank<R>.json``.

    :param keep: 1: with ``KeepNCheckpoints(n=1)``.
    :param options: see :func:`make_trainer`.
    """
    record = Record()
    trainer = make_trainer(out, name, parallel, checkpoint, record, keep, **options)
    computed_in: set[str] = set()  # the dtype of a block's parameters during its forward
    block = trainer.unwrapped_model.model.transformer_decoder.layers[0]
    block.register_forward_pre_hook(
        lambda module, _: computed_in.add(str(next(module.parameters()).dtype))
    )
    trainer.fit(loader(), ckpt_path=ckpt_path)
    weights = {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).tolist()
        for k, v in trainer.unwrapped_model.state_dict().items()
        if k.endswith("ln_f.weight")
    }
    result = {
        "losses": record.losses,
        "grad_norms": record.grad_norms,
        "bytes": record.bytes,
        "param_type": type(next(trainer.model.parameters())).__name__,
        "built_on_meta": getattr(trainer.strategy, "built_on_meta", False),
        "computed_in": sorted(computed_in),
        "kept_in": sorted({str(p.dtype) for p in trainer.model.parameters()}),
        "ln_f": weights,
    }
    rank = os.environ.get("RANK", "0")
    (out / f"{name}.rank{rank}.json").write_text(json.dumps(result))


def compare_with_torch_save(out: Path, folder: Path) -> None:
    """Load ``folder`` in one process; is every tensor equal to ``dcp_to_torch_save`` of it?"""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    converted = out / "dcp10.pt"
    dcp_to_torch_save(folder, converted)
    reference = torch.load(converted, weights_only=True)
    trainer = make_trainer(out, "alone_load", "fsdp2", {"format": "dcp"}, Record())
    trainer.load_checkpoint(folder)
    model = trainer.unwrapped_model.state_dict()
    optimizer = trainer.optimizer.state_dict()["state"]
    equal = {
        "model": all(torch.equal(model[k], v) for k, v in reference["model"].items())
        and set(model) == set(reference["model"]),
        "optimizer": all(
            torch.equal(optimizer[int(i)][k], v)
            for i, entries in reference["optimizer_state"].items()
            for k, v in entries.items()
        )
        and len(reference["optimizer_state"]) == len(optimizer),
        "step": trainer.global_step,
    }
    (out / "alone_equal.json").write_text(json.dumps(equal))


def optimizer_sweep(out: Path) -> None:
    """Every built-in and bridged torch optimizer, 3 steps on a sharded and a whole model.

    Records, per optimizer, the largest difference of the weights, or the error it raised.
    """
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2,))
    results: dict[str, Any] = {}
    for name in BUILT_IN_OPTIMIZERS + BRIDGED_TORCH_OPTIMIZERS:
        torch.manual_seed(0)
        whole = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 4))
        sharded = fully_shard(
            nn.Sequential(
                *(
                    nn.Linear(m.in_features, m.out_features)
                    if isinstance(m, nn.Linear)
                    else nn.Tanh()
                    for m in whole
                )
            ),
            mesh=mesh,
        )
        sharded.load_state_dict(
            {
                k: torch.distributed.tensor.distribute_tensor(
                    v, mesh, [torch.distributed.tensor.Shard(0)]
                )
                for k, v in whole.state_dict().items()
            }
        )
        cls = plugtrain.resolve("optimizer", name)
        try:
            pairs = [(cls(model.parameters(), lr=1e-2), model) for model in (whole, sharded)]
            for step in range(3):
                inputs = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
                for optimizer, model in pairs:
                    optimizer.zero_grad()
                    model(inputs).square().mean().backward()
                    optimizer.step()
            full = {k: v.full_tensor() for k, v in sharded.state_dict().items()}
            results[name] = max(
                float((full[k] - v).abs().max()) for k, v in whole.state_dict().items()
            )
        except (RuntimeError, ValueError) as exc:
            results[name] = f"{type(exc).__name__}: {exc}"
    if os.environ.get("RANK") == "0":
        (out / "optimizers.json").write_text(json.dumps(results))


def refused_when_made_in_python(out: Path) -> None:
    """A Trainer given Lamb (not declared for shards) by a callable under FSDP2: the error."""
    from plugtrain.errors import ConfigError

    lamb = plugtrain.resolve("optimizer", "Lamb")
    try:
        Trainer(
            backend={"backend_type": "CPU", "num_processes": 2, "data_parallel": "fsdp2"},
            model=gpt,
            optimizer=lambda m: lamb(m.parameters(), lr=1e-2),
            model_dir=out / "runs" / "refused",
        )
        message = "accepted"
    except ConfigError as exc:
        message = str(exc)
    if os.environ.get("RANK") == "0":
        (out / "refused.txt").write_text(message)


def alone(out: Path) -> None:
    """One process, no process group: resume the 2-process DCP checkpoint of step 10, and
    compare what it loads with ``dcp_to_torch_save`` of it."""
    dcp10 = out / "runs" / "fsdp2_dcp" / "checkpoint_10.mdl"
    run(out, "alone_dcp_resume", "fsdp2", {"format": "dcp"}, dcp10)
    compare_with_torch_save(out, dcp10)


def main() -> None:
    """The runs of one launch (2 processes) or of ``--alone``."""
    out = Path(sys.argv[1])
    runs = out / "runs"
    if "--four" in sys.argv:  # before the launch of 2, which resumes this run's checkpoint
        run(out, "hsdp_2x2", "hsdp", {"format": "dcp"}, None)
        return
    if "--alone" in sys.argv:
        alone(out)
        return
    optimizer_sweep(out)
    refused_when_made_in_python(out)
    run(out, "ddp", "ddp", {}, None)
    run(out, "fsdp2_dcp", "fsdp2", {"format": "dcp"}, None)
    run(out, "fsdp2_file", "fsdp2", {}, None, meta_device_init=False)
    run(out, "hsdp", "hsdp", {}, None)
    no_reshard = {
        "reshard_after_forward": False,
        "activation_checkpointing": "full",
        "compile": "regional",
    }
    run(out, "fsdp2_kept_checkpointed", "fsdp2", {}, None, **no_reshard)
    run(out, "fsdp2_bfloat16", "fsdp2", {}, None, half="bfloat16")
    run(out, "fsdp2_float16", "fsdp2", {}, None, half="float16")
    dcp10 = runs / "fsdp2_dcp" / "checkpoint_10.mdl"
    background = {"format": "dcp", "async_save": True, "steps": 5}  # saves at 15 and 20
    run(out, "dcp_resume", "fsdp2", background, dcp10, keep=1)
    file10 = runs / "fsdp2_file" / "checkpoint_10.mdl"
    run(out, "file_resume", "fsdp2", {}, file10)
    hsdp10 = runs / "hsdp_2x2" / "checkpoint_10.mdl"  # 2 x 2 processes, resharded onto 1 x 2
    run(out, "hsdp_2x2_resume", "fsdp2", {"format": "dcp"}, hsdp10)


if __name__ == "__main__":
    main()
