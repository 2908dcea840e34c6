"""DDP vs FSDP2 on 2 CPU processes (gloo): memory and step time; checkpoint blocking times.

    python bench/sharded.py                 # both strategies, prints the tables
    python bench/sharded.py --layers 4      # a smaller model (faster)

Each strategy runs in its own torchrun launch of 2 processes (so that peak RSS is its own;
FSDP2 twice: built on the meta device and filled per shard, and built whole first):
plugtrain's Trainer trains a GPT decoder (default about 31 M parameters: 10 blocks of width
512, AdamW) for a few steps; the worker records rank 0's local bytes of parameters, gradients
and AdamW state, its peak RSS (during training, and after fit's final single-file save,
which gathers the whole state on rank 0 under FSDP2), and the median step time. The FSDP2
launch then times, on the same state, how long a checkpoint blocks the loop: a single file
(gathered), DCP synchronous, DCP asynchronous (``checkpoint.async_save``: the call returns
once the state is staged; the first one also makes the staging buffers), and the step after
an asynchronous save (which overlaps the background write) against a step with nothing in
the background; medians of several saves.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARMUP, STEPS = 2, 6
SAVES = 5
MODES: dict[str, dict[str, Any]] = {
    "ddp": {"data_parallel": "ddp"},
    "fsdp2": {"data_parallel": "fsdp2"},  # built on the meta device, filled per shard
    "fsdp2-whole": {"data_parallel": "fsdp2", "meta_device_init": False},
}


def _worker(mode: str, layers: int, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    import plugtrain
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer, state_template
    from plugtrain.train.distributed.dtensor_state import local_tensor
    from plugtrain.train.trainer import Trainer
    from plugtrain_models.gpt import GPT

    torch.set_num_threads(1)
    times: list[float] = []
    sizes: dict[str, int] = {}
    training_peak: list[float] = []

    class Clock:
        start = 0.0

        def on_train_step_start(self, trainer: Any, step: int) -> None:
            self.start = time.perf_counter()

        def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
            if trainer.global_step == 1:
                params = [p for g in optimizer.param_groups for p in g["params"]]
                sizes["params"] = sum(local_tensor(p).nbytes for p in params)
                sizes["grads"] = sum(local_tensor(p.grad).nbytes for p in params)
                sizes["optimizer"] = sum(
                    local_tensor(v).nbytes
                    for s in optimizer.state.values()
                    for v in s.values()
                    if isinstance(v, torch.Tensor)
                )

        def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
            times.append(time.perf_counter() - self.start)
            training_peak[:] = [_peak_rss_mib()]  # the last step's: before fit's final save

    rows = torch.randint(0, 256, (256, 65), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": r[:-1], "labels": r[1:]} for r in rows]
    adamw = plugtrain.resolve("optimizer", "AdamW")
    work = Path(tempfile.mkdtemp(prefix=f"bench-sharded-{mode}-", dir=out))
    trainer = Trainer(
        backend={"backend_type": "CPU", "num_processes": 2, **MODES[mode]},
        model=lambda: GPT(n_layer=layers, n_head=8, n_embd=512, block_size=64),
        optimizer=lambda m: adamw(m.parameters(), lr=1e-4),
        loop={"max_steps": WARMUP + STEPS},
        seed=1,
        model_dir=work / "run",
        checkpoint={"autoload_last_checkpoint": False},
        precision={"enabled": False},
        logging={"log_steps": 1, "log_level": "WARNING"},
        callbacks=[Clock()],
        loggers=[{"MetricsFilesLogger": None}, {"ProgressLogger": None}],
    )
    trainer.fit(DataLoader(data, batch_size=4), ckpt_path=None)
    result: dict[str, Any] = {
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "bytes": sizes,
        "step_s": statistics.median(times[WARMUP:]),
        "peak_rss_training_mib": training_peak[0],
        "peak_rss_mib": _peak_rss_mib(),  # with fit's final save (single file), not the ones below
    }
    if mode == "fsdp2":
        result["save_s"] = _save_times(trainer, work, dist, DCPCheckpointer, state_template)
    if dist.get_rank() == 0:
        (out / f"{mode}.json").write_text(json.dumps(result))


def _peak_rss_mib() -> float:
    """This process's peak resident set size so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _save_times(trainer: Any, work: Path, dist: Any, dcp_class: Any, template: Any) -> dict:
    """Seconds each kind of save blocks rank 0 (after a barrier), and the steps around async.

    DCP saves are repeated (:data:`SAVES` times) and their median taken; the first async save
    also makes the staging buffers and is reported apart. Each async save is followed by one
    step while it writes; each wait for it by a step with nothing in the background.
    """
    import shutil

    from plugtrain.train.checkpointing.storage.formats import checkpointer_for

    step = [100]

    def blocked() -> float:
        dist.barrier()
        start = time.perf_counter()
        step[0] += 1
        trainer.global_step = step[0]
        trainer.save_checkpoint()
        return time.perf_counter() - start

    def one_step() -> float:
        start = time.perf_counter()
        trainer.forward(batch).loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        return time.perf_counter() - start

    batch = {"input_ids": torch_batch(), "labels": torch_batch()}
    found: dict[str, Any] = {}
    trainer.checkpointer = checkpointer_for(trainer)
    found["file"] = blocked()
    times: dict[str, list[float]] = {"dcp_sync": [], "dcp_async": [], "during": [], "after": []}
    for name, background in (("dcp_sync", False), ("dcp_async", True)):
        folder = work / name
        trainer.checkpointer = dcp_class(
            folder,
            "checkpoint_{step}",
            lambda with_state: template(trainer, with_state),
            is_writer=trainer.strategy.is_writer,
            async_save=background,
        )
        trainer.state.verified = True  # as after a run's first save (which waits to verify)
        for _ in range(SAVES + background):
            times[name].append(blocked())
            if background:
                times["during"].append(one_step())  # the next step's work, while the write runs
                trainer.checkpointer.wait()
                dist.barrier()
                times["after"].append(one_step())
            if dist.get_rank() == 0:
                shutil.rmtree(folder, ignore_errors=True)
            dist.barrier()
    found["dcp_sync"] = statistics.median(times["dcp_sync"])
    found["dcp_async_first"] = times["dcp_async"][0]
    found["dcp_async"] = statistics.median(times["dcp_async"][1:])
    found["step_during_async"] = statistics.median(times["during"][1:])
    found["step_after"] = statistics.median(times["after"][1:])
    found["samples"] = times
    found["rss_mib_after_async"] = _current_rss_mib()  # the staging buffers stay resident
    return found


def _current_rss_mib() -> float:
    """This process's resident set size now, MiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def torch_batch() -> Any:
    import torch

    return torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(1))


def _build_only(mode: str, layers: int, out: Path) -> None:
    """Build the trainer's model and shard it, and record the peak RSS; no optimizer, no step."""
    import torch
    import torch.distributed as dist

    from plugtrain.train.trainer import Trainer
    from plugtrain_models.gpt import GPT

    torch.set_num_threads(1)
    start = time.perf_counter()
    trainer = Trainer(
        backend={"backend_type": "CPU", "num_processes": 2, **MODES[mode]},
        model=lambda: GPT(n_layer=layers, n_head=8, n_embd=512, block_size=64),
        seed=1,
        model_dir=Path(tempfile.mkdtemp(prefix=f"bench-build-{mode}-", dir=out)),
        logging={"log_steps": 1, "log_level": "WARNING"},
    )
    result = {
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "build_s": time.perf_counter() - start,
        "peak_rss_mib": _peak_rss_mib(),
    }
    if dist.get_rank() == 0:
        (out / f"{mode}-build.json").write_text(json.dumps(result))
    trainer.backend.close()


def _launch(mode: str, layers: int, out: Path, build_only: bool = False) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        __file__,
        "--worker",
        mode,
        "--layers",
        str(layers),
        "--out",
        str(out),
        *(["--build-only"] if build_only else []),
    ]
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    name = f"{mode}-build.json" if build_only else f"{mode}.json"
    return json.loads((out / name).read_text())  # type: ignore[no-any-return]


def main() -> None:
    """Run both strategies and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10, help="decoder blocks (10: ~31 M)")
    parser.add_argument(
        "--build-layers", type=int, default=40, help="blocks of the model only built (40: ~152 M)"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker and args.build_only:
        _build_only(args.worker, args.layers, Path(args.out))
        return
    if args.worker:
        _worker(args.worker, args.layers, Path(args.out))
        return
    with tempfile.TemporaryDirectory() as scratch:
        ddp = _launch("ddp", args.layers, Path(scratch))
        fsdp = _launch("fsdp2", args.layers, Path(scratch))
        built = {m: _launch(m, args.build_layers, Path(scratch), build_only=True) for m in MODES}
    mib = 2**20
    print(f"GPT, {ddp['parameters'] / 1e6:.1f} M parameters, 2 processes (gloo), rank 0:\n")
    print("| | DDP | FSDP2 | FSDP2 / DDP |")
    print("|---|---|---|---|")
    for key in ("params", "grads", "optimizer"):
        a, b = ddp["bytes"][key] / mib, fsdp["bytes"][key] / mib
        print(f"| {key} MiB | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    a, b = sum(ddp["bytes"].values()) / mib, sum(fsdp["bytes"].values()) / mib
    print(f"| params+grads+optimizer MiB | {a:.1f} | {b:.1f} | {b / a:.2f} |")
    a, b = ddp["peak_rss_training_mib"], fsdp["peak_rss_training_mib"]
    print(f"| peak RSS MiB, training | {a:.0f} | {b:.0f} | {b / a:.2f} |")
    a, b = ddp["peak_rss_mib"], fsdp["peak_rss_mib"]
    print(f"| peak RSS MiB, with fit's final save (file) | {a:.0f} | {b:.0f} | {b / a:.2f} |")
    a, b = ddp["step_s"], fsdp["step_s"]
    print(f"| median step s | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    print(
        f"\nBuilding a {built['ddp']['parameters'] / 1e6:.0f} M GPT ({args.build_layers} blocks) "
        "and sharding it (no optimizer, no step): peak RSS MiB, rank 0\n"
    )
    print("| DDP | FSDP2, built whole | FSDP2, on meta | meta / whole | build s, meta / whole |")
    print("|---|---|---|---|---|")
    a, b, c = (built[m]["peak_rss_mib"] for m in ("ddp", "fsdp2-whole", "fsdp2"))
    t = built["fsdp2"]["build_s"] / built["fsdp2-whole"]["build_s"]
    print(f"| {a:.0f} | {b:.0f} | {c:.0f} | {c / b:.2f} | {t:.2f} |")
    saves = fsdp["save_s"]
    print(f"\nFSDP2 checkpoint, seconds the loop is blocked (rank 0, median of {SAVES}):\n")
    print("| save | s | / DCP sync |")
    print("|---|---|---|")
    for key in ("file", "dcp_sync", "dcp_async_first", "dcp_async"):
        print(f"| {key} | {saves[key]:.3f} | {saves[key] / saves['dcp_sync']:.2f} |")
    ratio = saves["step_during_async"] / saves["step_after"]
    print(
        f"\nstep while the async save writes: {saves['step_during_async']:.3f} s, "
        f"a step after it: {saves['step_after']:.3f} s ({ratio:.2f}x; medians of {SAVES})"
    )
    pairs = zip(saves["samples"]["during"][1:], saves["samples"]["after"][1:], strict=True)
    print("each save's ratio: " + ", ".join(f"{d / a:.2f}" for d, a in pairs))
    print(
        f"RSS after the async saves (staging buffers kept): {saves['rss_mib_after_async']:.0f} MiB"
        f" (DDP's training peak: {ddp['peak_rss_training_mib']:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
