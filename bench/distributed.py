"""Data parallel on CPU: throughput of 1 vs 2 processes, and the communication share of a step.

    python bench/distributed.py            # runs every case, writes bench/distributed.md

Each case trains the same MLP (about 6.3 M parameters, 25 MB of gradients per step) on a fixed
global batch with plugtrain's CPU backend: one process (1 and 2 intra-op threads), and two
processes started by torchrun (DDP over gloo, one thread each, half the batch each). In the
two-process case the same steps are timed again inside DDP's ``no_sync()`` (no gradient
all-reduce): the difference is the communication that the backward pass does not hide. A bare
all-reduce of a gradient-sized tensor is timed too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GLOBAL_BATCH = 256
IN_FEATURES, HIDDEN, DEPTH, CLASSES = 1024, 2048, 2, 10
WARMUP, STEPS, REPEATS = 3, 15, 3


def _worker(threads: int) -> dict[str, float]:
    import torch

    import plugtrain
    from plugtrain.builtin.models import MLP

    torch.set_num_threads(threads)
    backend = plugtrain.backend("CPU", num_processes=int(os.environ.get("WORLD_SIZE", "1")))
    backend.check_runnable()
    world, rank = backend.world_size, backend.rank
    torch.manual_seed(0)
    model = backend.prepare_model(
        MLP(in_features=IN_FEATURES, hidden=HIDDEN, depth=DEPTH, out_features=CLASSES)
    )
    optimizer = plugtrain.resolve("optimizer", "SGD")(model.parameters(), lr=0.01)
    local = GLOBAL_BATCH // world
    generator = torch.Generator().manual_seed(rank)
    inputs = torch.randn(local, IN_FEATURES, generator=generator)
    labels = torch.randint(0, CLASSES, (local,), generator=generator)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    def timed(run_step) -> float:
        for _ in range(WARMUP):
            run_step()
        best = []
        for _ in range(REPEATS):
            if world > 1:
                torch.distributed.barrier()
            start = time.perf_counter()
            for _ in range(STEPS):
                run_step()
            best.append((time.perf_counter() - start) / STEPS)
        return statistics.median(best)

    result = {"world": world, "threads": threads, "step_s": timed(step)}
    if world > 1:

        def local_step() -> None:
            with model.no_sync():
                step()

        result["no_sync_step_s"] = timed(local_step)
        grads = torch.zeros(sum(p.numel() for p in model.parameters()))
        result["allreduce_s"] = timed(lambda: torch.distributed.all_reduce(grads))
    params = sum(p.numel() for p in model.parameters())
    result["parameters"] = params
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    return result


def _case(processes: int, threads: int) -> dict[str, float]:
    script = [str(Path(__file__).resolve()), "--worker", "--threads", str(threads)]
    if processes == 1:
        command = [sys.executable, *script]
    else:
        torchrun = ["-m", "torch.distributed.run", "--standalone"]
        command = [sys.executable, *torchrun, f"--nproc-per-node={processes}", *script]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=str(HERE / "distributed.md"))
    args = parser.parse_args()
    if args.worker:
        _worker(args.threads)
        # torch's DDP-over-gloo workers sometimes abort at interpreter exit (see launch.py).
        sys.stdout.flush()
        os._exit(0)
    import torch

    cases = [(1, 1), (1, 2), (2, 1)]
    results = [_case(p, t) for p, t in cases]
    base = results[0]["step_s"]
    rows = []
    for (processes, threads), r in zip(cases, results, strict=True):
        throughput = GLOBAL_BATCH / r["step_s"]
        comm = ""
        if "no_sync_step_s" in r:
            share = max(0.0, 1 - r["no_sync_step_s"] / r["step_s"])
            comm = (
                f"{share:.0%} ({r['step_s'] * 1e3:.1f} ms with all-reduce, "
                f"{r['no_sync_step_s'] * 1e3:.1f} ms without; bare all-reduce "
                f"{r['allreduce_s'] * 1e3:.1f} ms)"
            )
        rows.append(
            f"| {processes} | {threads} | {GLOBAL_BATCH // processes} | "
            f"{r['step_s'] * 1e3:.1f} | {throughput:,.0f} | {base / r['step_s']:.2f}x | "
            f"{comm or '-'} |"
        )
    params = results[0]["parameters"]
    text = "\n".join(
        [
            "# Data parallel on CPU: 1 vs 2 processes",
            "",
            "`python bench/distributed.py` (this file is written by it). MLP "
            f"{IN_FEATURES}-{HIDDEN}x{DEPTH}-{CLASSES}, {params / 1e6:.1f} M parameters "
            f"({params * 4 / 1e6:.0f} MB of fp32 gradients all-reduced per step), global batch "
            f"{GLOBAL_BATCH}, plugtrain SGD, median of {REPEATS} runs of {STEPS} steps after "
            f"{WARMUP} warm-up steps. Two processes: `torchrun --standalone`, plugtrain's CPU "
            "backend (DDP over gloo), one intra-op thread each.",
            "",
            f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, Python "
            f"{platform.python_version()}, torch {torch.__version__}.",
            "",
            "| processes | threads each | batch each | ms/step | examples/s | vs 1x1 "
            "| communication share of a step |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            "The communication share is the part of a two-process step that the gradient "
            "all-reduce adds: 1 - (step inside DDP's `no_sync()`) / (normal step). DDP starts "
            "all-reducing buckets while the backward pass still runs, so this is the exposed "
            "cost; the bare all-reduce of one gradient-sized tensor is shown beside it.",
            "On two cores, one process with two threads beats two processes with one thread "
            "each: both use both cores for compute, and the two processes also pay for the "
            "all-reduce. Data parallel pays off across machines or GPUs, not on one small host.",
            "",
        ]
    )
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
