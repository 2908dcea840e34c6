"""The accumulated data-parallel step vs a hand loop with ``no_sync``, side by side.

    python bench/accumulation.py        # starts 2 CPU processes with torchrun, prints ratios

Both sides train the same MLP (about 6.3 M parameters, 25 MB of fp32 gradients) over DDP on
gloo, 2 processes, ``grad_accum_steps`` 4. plugtrain: ``TrainingLoop.train_step`` of a
``Trainer`` on the ``CPU`` backend (micro-batches 1-3 under ``no_sync``, the loss times its
count, one all-reduce of the count, the gradients scaled by ``world_size / N``). Hand loop:
``loss / 4`` backward, ``no_sync()`` on micro-batches 1-3, ``optimizer.step()``. The two are
timed in alternating rounds in the same processes; the ratio of the medians is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACCUM = 4
MICRO_BATCH = 32  # per process
IN_FEATURES, HIDDEN, DEPTH, CLASSES = 1024, 2048, 2, 10
WARMUP, STEPS, ROUNDS = 2, 5, 5


def _worker() -> None:
    import torch

    import plugtrain
    from plugtrain.builtin.models import MLP
    from plugtrain.train.data.stream import DataStream
    from plugtrain.train.trainer import Trainer

    torch.set_num_threads(1)
    backend = plugtrain.backend("CPU", num_processes=int(os.environ.get("WORLD_SIZE", "1")))
    backend.check_runnable()
    rank = backend.rank
    sgd = plugtrain.resolve("optimizer", "SGD")

    def mlp() -> Any:
        torch.manual_seed(0)
        return MLP(in_features=IN_FEATURES, hidden=HIDDEN, depth=DEPTH, out_features=CLASSES)

    generator = torch.Generator().manual_seed(rank)
    batches = [
        (
            torch.randn(MICRO_BATCH, IN_FEATURES, generator=generator),
            torch.randint(0, CLASSES, (MICRO_BATCH,), generator=generator),
        )
        for _ in range(ACCUM)
    ]
    trainer = Trainer(
        backend=backend,
        model_dir=Path(os.environ["BENCH_DIR"]) / "model",
        model=mlp,
        optimizer=lambda m: sgd(m.parameters(), lr=0.01),
        loop={"max_steps": 10**6, "grad_accum_steps": ACCUM},
        logging={"log_steps": 1000, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
    )
    trainer.model.train()
    stream = DataStream(batches, None)

    def plugtrain_step() -> None:
        trainer.training_loop.train_step(stream)

    hand_model = backend.prepare_model(mlp())
    hand_optimizer = sgd(hand_model.parameters(), lr=0.01)

    def hand_step() -> None:
        hand_optimizer.zero_grad(set_to_none=True)
        for index, (inputs, labels) in enumerate(batches):
            if index < ACCUM - 1:
                with hand_model.no_sync():
                    loss = torch.nn.functional.cross_entropy(hand_model(inputs), labels)
                    (loss / ACCUM).backward()
            else:
                loss = torch.nn.functional.cross_entropy(hand_model(inputs), labels)
                (loss / ACCUM).backward()
        hand_optimizer.step()

    def timed(step: Any) -> float:
        torch.distributed.barrier()
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.distributed.barrier()
        return (time.perf_counter() - start) / STEPS

    for _ in range(WARMUP):
        plugtrain_step()
        hand_step()
    mine, hand = [], []
    for _ in range(ROUNDS):
        mine.append(timed(plugtrain_step))
        hand.append(timed(hand_step))
    params = sum(p.numel() for p in hand_model.parameters())
    result = {
        "plugtrain_s": statistics.median(mine),
        "hand_s": statistics.median(hand),
        "parameters": params,
    }
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    """Run the two-process comparison (``--worker``: one of its processes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        _worker()
        sys.stdout.flush()
        os._exit(0)  # gloo workers may abort in interpreter teardown (see plugtrain.launching)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        env.update(OMP_NUM_THREADS="1", BENCH_DIR=folder)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command = [*torchrun, "--nproc-per-node=2", str(Path(__file__).resolve()), "--worker"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    mine, hand = result["plugtrain_s"], result["hand_s"]
    print(
        f"MLP {result['parameters'] / 1e6:.1f} M parameters "
        f"({result['parameters'] * 4 / 1e6:.0f} MB of gradients), 2 processes, "
        f"grad_accum_steps {ACCUM}, micro-batch {MICRO_BATCH} per process; "
        f"median of {ROUNDS} alternating rounds of {STEPS} steps"
    )
    print(f"plugtrain accumulated step: {mine * 1e3:.1f} ms")
    print(f"hand loop with no_sync:     {hand * 1e3:.1f} ms")
    print(f"ratio plugtrain / hand:     {mine / hand:.3f}x")


if __name__ == "__main__":
    main()
