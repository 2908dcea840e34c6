"""Time to the first step: two ``plugtrain fit`` nodes on loopback vs one standalone run.

    python bench/multi_node.py --repeats 3

Both cases train the same 2-process CPU job (gloo): ``num_processes: 2`` on one machine
(torchrun ``--standalone``), and ``num_processes: 1, num_nodes: 2`` started as two commands
(node ranks 0 and 1) meeting at a c10d rendezvous on 127.0.0.1. The time to the first step is
from starting the command(s) to the first train row in ``metrics.jsonl`` (polled every 20 ms).
Cases are interleaved; the median of each and their ratio are printed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = """\
trainer:
  init:
    backend: {{backend_type: CPU, {backend}}}
    model_dir: {model_dir}
    seed: 1
    model:
      MLP: {{in_features: 16, hidden: 32, out_features: 4}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 5}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 4, num_examples: 64, in_features: 16, num_classes: 4}}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _first_step(place: Path, backend: str, nodes: int) -> float:
    run = place / "run.yaml"
    metrics = place / "model" / "metrics.jsonl"
    run.write_text(RUN.format(backend=backend, model_dir=place / "model"))
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    start = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "plugtrain", "fit", str(run)],
            env={**environ, "NODE_RANK": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in range(nodes)
    ]
    seen = None
    while seen is None:
        if metrics.exists() and '"train"' in metrics.read_text():
            seen = time.perf_counter() - start
        elif all(p.poll() is not None for p in processes):
            message = f"no step was written in {place}"
            raise RuntimeError(message)
        time.sleep(0.02)
    for process in processes:
        process.wait(timeout=120)
    return seen


def main() -> None:
    """Interleave the two cases and print their medians and ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    standalone, two_nodes = [], []
    with tempfile.TemporaryDirectory() as root:
        for repeat in range(options.repeats):
            place = Path(root) / f"standalone{repeat}"
            place.mkdir()
            standalone.append(_first_step(place, "num_processes: 2", 1))
            place = Path(root) / f"nodes{repeat}"
            place.mkdir()
            endpoint = f"127.0.0.1:{_free_port()}"
            backend = f"num_processes: 1, num_nodes: 2, rdzv_endpoint: '{endpoint}'"
            two_nodes.append(_first_step(place, backend, 2))
            print(f"repeat {repeat}: standalone {standalone[-1]:.2f} s, two nodes "
                  f"{two_nodes[-1]:.2f} s", flush=True)  # fmt: skip
    a, b = statistics.median(standalone), statistics.median(two_nodes)
    print("| case | median s to the first step | x standalone |")
    print("|---|---|---|")
    print(f"| standalone, 2 processes | {a:.2f} | 1.00 |")
    print(f"| 2 nodes x 1 process, loopback | {b:.2f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
