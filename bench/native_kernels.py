"""The optimizers' one-pass C kernels against the multi-tensor path they replace, side by side.

For each optimizer with kernels (float32, CPU, default constructor path) and each shape of the
acceptance script (``wide``: 2 x 1024x4096 + vectors, timed as it times them, nothing evicted;
``large``: 4096x4096, 4096, 4096x2048, 2048 and ``many``: 400 x 100x100, each step after a
256 MiB copy that evicts the optimizer's tensors), this times the step with the kernels on and
off, interleaved in one process, and prints both, their ratio and, for ``large`` and ``many``,
the ratio to the memory floor (the copy's bandwidth times the bytes the update must move, the
acceptance script's counts).

    python bench/native_kernels.py [--rows Lion,Lamb] [--shapes wide,large,many] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import plugtrain
from plugtrain_optimizers import _native

ROWS = [
    "ASGD", "Adadelta", "Adafactor", "AdamWScheduleFree", "Adamax", "Lamb", "Lion", "NAdam",
    "Rprop", "SGDScheduleFree",
]  # fmt: skip
SHAPES = {
    "wide": [(1024, 4096), (4096,), (1024, 4096), (1024,)],
    "large": [(4096, 4096), (4096,), (4096, 2048), (2048,)],
    "many": [(100, 100)] * 400,
}
# Parameter-sized float32 tensors a step moves at the least: (one pass, re-reads of a tensor
# over 256 KiB), as the acceptance script counts them.
FLOOR = {
    "ASGD": (4, 0), "Adadelta": (7, 0), "Adafactor": (3, 3), "Adafactor 1-D": (5, 3),
    "AdamWScheduleFree": (7, 0), "Adamax": (7, 0), "Lamb": (7, 3), "Lion": (5, 0),
    "NAdam": (7, 0), "Rprop": (7, 0), "SGDScheduleFree": (5, 0),
}  # fmt: skip
LR = {"Lion": 1e-4, "Lamb": 1e-3, "Adafactor": 1e-2}


def switch(on: bool) -> None:
    """Turn the kernels on or off for the next steps."""
    _native.set_enabled(on)


def build(name: str, shape: str, on: bool) -> torch.optim.Optimizer:
    gen = torch.Generator().manual_seed(0)
    params = []
    for dims in SHAPES[shape]:
        p = torch.nn.Parameter(torch.randn(dims, generator=gen) * 0.02)
        p.grad = torch.randn(dims, generator=gen) * 1e-3
        params.append(p)
    switch(on)
    return plugtrain.resolve("optimizer", name)(params, lr=LR.get(name, 0.01))


def floor_bytes(name: str, optimizer: torch.optim.Optimizer) -> int:
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            one, extra = FLOOR[f"{name} 1-D" if name == "Adafactor" and p.dim() < 2 else name]
            size = p.numel() * p.element_size()
            total += (one + (extra if size > 256 * 1024 else 0)) * size
    return total


def measure(name: str, shape: str, reps: int, copy: tuple[torch.Tensor, torch.Tensor]):
    src, dst = copy
    evict = shape != "wide"
    optimizers = {on: build(name, shape, on) for on in (True, False)}
    times: dict[bool, list[float]] = {True: [], False: []}
    copies: list[float] = []
    for on, opt in optimizers.items():  # warm: state and scratch
        switch(on)
        for _ in range(4):
            opt.step()
    for _ in range(reps):
        for on, opt in optimizers.items():
            switch(on)
            if evict:
                start = time.perf_counter()
                dst.copy_(src)
                copies.append(time.perf_counter() - start)
            start = time.perf_counter()
            opt.step()
            times[on].append(time.perf_counter() - start)
    on, off = (statistics.median(times[k]) for k in (True, False))
    line = f"{shape:5} {name:18} kernels {on * 1e3:7.2f} ms  torch ops {off * 1e3:7.2f} ms  "
    line += f"= {on / off:4.2f}x"
    if evict:
        bandwidth = 2 * src.numel() * src.element_size() / statistics.median(copies)
        floor = floor_bytes(name, optimizers[True]) / bandwidth
        line += f"   floor {floor * 1e3:6.2f} ms: {on / floor:4.2f}x vs {off / floor:4.2f}x"
    print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    src = torch.randn(64 * 2**20)
    copy = (src, torch.empty_like(src))
    if _native.load() is None:
        raise SystemExit(f"the kernels are not in use here: {_native.status()}")
    status = _native.status().replace(os.path.expanduser("~"), "~")
    print(f"kernels: {status}; {args.threads} threads; load average {load:.2f}")
    for shape in args.shapes.split(","):
        for name in args.rows.split(","):
            measure(name, shape, args.reps, copy)
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
