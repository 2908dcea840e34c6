"""Issue 31's speed options, measured: the Throughput callback's cost, compile, checkpointing.

``throughput``: what the Throughput callback and the data stream's token count add to a step
(the hooks a step calls, with a batch's token count; a record's rates every ``log_steps``),
against a bare ``perf_counter`` loop.

``compile``: a GPT from plugtrain-models trained by the Trainer with ``compile`` off, regional
and full, each in a fresh process with an empty inductor cache: the first step's time (the
cold compile, which eager's first step is subtracted from) and the median of the next steps.

``checkpointing``: the same GPT with ``activation_checkpointing`` off, full and selective, each
in a fresh process: the peak resident memory above the resting process during one training
step over the process at the step's start (activations and temporaries: the gradients and the
optimizer's state already exist; the CPU has no allocator statistics, so this is
``VmHWM`` with glibc returning large blocks at once, ``MALLOC_MMAP_THRESHOLD_=65536``) and the
median step time.

Step times are the process's CPU time (``time.process_time``, all threads): the 2-core machine is
shared, and wall times there swing by several times between runs.

Run: ``python bench/speed.py [throughput|compile|checkpointing|all] [--layers 8] [--hidden 128]
[--seq 128] [--batch 8] [--steps 10] [--threads 1]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def _throughput(repeats: int = 200_000, log_steps: int = 50) -> None:
    from plugtrain.train.observability.throughput import Throughput, token_counter

    class Stream:
        tokens = samples = 0

    class Trainer:
        stream = Stream()
        global_step = 0
        precision = None
        backend = None
        device = torch.device("cpu")

    batch = {"input_ids": torch.zeros(8, 128, dtype=torch.long)}
    count = token_counter(object())
    trainer = Trainer()
    callback = Throughput(peak_flops=1e12)
    callback.on_fit_start(trainer)
    callback._count_step = -1  # measure the steady state (no counting step)
    callback.flops_per_step, callback.step_tokens = 10**9, 1024
    metrics: dict[str, float] = {}
    best_bare = best_hooked = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            trainer.stream.tokens += 0
        best_bare = min(best_bare, time.perf_counter() - start)
        start = time.perf_counter()
        for step in range(repeats):
            callback.on_train_step_start(trainer, step)
            trainer.stream.tokens += count(batch)
            callback.on_before_optimizer_step(trainer, None)
            if step % log_steps == 0:
                callback.on_train_step_end(trainer, metrics)
        best_hooked = min(best_hooked, time.perf_counter() - start)
    per_step = (best_hooked - best_bare) / repeats * 1e6
    print(f"Throughput callback + token count, per step (log every {log_steps}): {per_step:.3f} us")
    print("metrics of a record:", sorted(metrics))


def _worker(args: argparse.Namespace) -> dict[str, Any]:
    """One configuration in this process: its first step, median step and peak memory."""
    torch.set_num_threads(args.threads)
    from plugtrain.train.trainer import Trainer
    from plugtrain_models.gpt import GPT

    def model() -> Any:
        return GPT(
            vocab_size=1024, n_layer=args.layers, n_head=4, n_embd=args.hidden,
            block_size=args.seq, dropout=0.0,
        )  # fmt: skip

    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(args.steps + 2):
        ids = torch.randint(0, 1024, (args.batch, args.seq), generator=generator)
        batches.append({"input_ids": ids, "labels": torch.roll(ids, -1, 1)})
    times: list[float] = []
    resting: list[int] = []

    class Clock:
        def on_train_step_start(self, trainer: Any, step: int) -> None:
            if step == 2:  # the optimizer's state and the gradients exist from here on
                resting.append(_rss())
                _reset_peak()
            times.append(time.process_time())

    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer(
            model=model,
            optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3),
            loop={"max_steps": args.steps + 1},
            logging={"log_steps": 1000},
            checkpoint={"autoload_last_checkpoint": False},
            model_dir=folder,
            seed=0,
            callbacks=[Clock(), {"Throughput": None}],
            loggers=[{"ProgressLogger": None}],
            compile=args.compile,
            activation_checkpointing=args.checkpointing,
        )
        trainer.fit(batches)
        peak = _peak() - resting[0]
    steps = [b - a for a, b in itertools.pairwise(times)]
    return {"first_s": steps[0], "median_s": statistics.median(steps[1:]), "peak_mb": peak / 1e6}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def _rss() -> int:
    return _status("VmRSS:")


def _peak() -> int:
    return _status("VmHWM:")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def _run(args: argparse.Namespace, **options: str) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", "--layers", str(args.layers)]
    command += ["--hidden", str(args.hidden), "--seq", str(args.seq), "--batch", str(args.batch)]
    command += ["--steps", str(args.steps), "--threads", str(args.threads)]
    for key, value in options.items():
        command += [f"--{key}", value]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "MALLOC_MMAP_THRESHOLD_": "65536"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _compile(args: argparse.Namespace) -> None:
    rows = {mode: _run(args, compile=mode) for mode in ("off", "regional", "full")}
    eager = rows["off"]
    print("\n| compile | cold compile s (first step - eager's) | steady ms/step | x eager |")
    print("|---|---|---|---|")
    for mode, row in rows.items():
        cold = row["first_s"] - eager["first_s"]
        ratio = row["median_s"] / eager["median_s"]
        print(f"| {mode} | {cold:.1f} | {row['median_s'] * 1e3:.1f} | {ratio:.3f} |")
    full = rows["full"]["first_s"] - eager["first_s"]
    regional = rows["regional"]["first_s"] - eager["first_s"]
    print(f"full / regional cold compile: {full / regional:.2f}x (goal: at least 3x)")


def _checkpointing(args: argparse.Namespace) -> None:
    rows = {mode: _run(args, checkpointing=mode) for mode in ("off", "full", "selective")}
    off = rows["off"]
    print("\n| activation_checkpointing | peak MB above rest | x off | ms/step | x off |")
    print("|---|---|---|---|---|")
    for mode, row in rows.items():
        print(
            f"| {mode} | {row['peak_mb']:.0f} | {row['peak_mb'] / off['peak_mb']:.2f} | "
            f"{row['median_s'] * 1e3:.1f} | {row['median_s'] / off['median_s']:.3f} |"
        )


def main() -> None:
    """Parse the arguments and run the asked measurements."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compile", default="off", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", default="off", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args)))
        return
    print(f"torch {torch.__version__}, {args.threads} threads, GPT {args.layers} layers, "
          f"hidden {args.hidden}, batch {args.batch}x{args.seq}")  # fmt: skip
    if args.what in ("throughput", "all"):
        _throughput()
    if args.what in ("checkpointing", "all"):
        _checkpointing(args)
    if args.what in ("compile", "all"):
        _compile(args)


if __name__ == "__main__":
    main()
