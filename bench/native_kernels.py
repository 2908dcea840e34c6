"""The optimizers' one-pass C kernels, built for this CPU and for AVX2, against the torch path.

For each optimizer with kernels (float32, CPU, default constructor path) and each shape (``4m``:
one 2048x2048 tensor; the acceptance script's ``wide``: 2 x 1024x4096 + vectors, timed as it
times them, nothing evicted; ``large``: 4096x4096, 4096, 4096x2048, 2048 and ``many``: 400 x
100x100, each step after a 256 MiB copy that evicts the optimizer's tensors), this times the
step three ways, interleaved in one process: with the kernels built for ``-march=native``, with
the kernels built for ``-march=x86-64-v3`` (AVX2 and FMA, no AVX-512) and on the torch-operation
path (what ``PLUGTRAIN_NATIVE_KERNELS=0`` runs). The kernel steps always run the kernels (their
step tuner chooses threads only); the torch path's tuner chooses its threads. It prints the
medians, each build's ratio to the torch path and, for ``large`` and ``many``, the ratios to the
memory floor (the copy's bandwidth times the bytes the update must move, the acceptance
script's counts). A row whose steps run no kernel (many-tensor Lamb: its tensors are below
the size its kernels take) says so and is left out of the worst ratio.

    python bench/native_kernels.py [--rows Lion,Lamb] [--shapes 4m,large] [--threads 1]
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
    "4m": [(2048, 2048)],
    "wide": [(1024, 4096), (4096,), (1024, 4096), (1024,)],
    "large": [(4096, 4096), (4096,), (4096, 2048), (2048,)],
    "many": [(100, 100)] * 400,
}
EVICTED = ("large", "many")
TARGETS = ("native", "x86-64-v3")
# Parameter-sized float32 tensors a step moves at the least: (one pass, re-reads of a tensor
# over 256 KiB), as the acceptance script counts them.
FLOOR = {
    "ASGD": (4, 0), "Adadelta": (7, 0), "Adafactor": (3, 3), "Adafactor 1-D": (5, 3),
    "AdamWScheduleFree": (7, 0), "Adamax": (7, 0), "Lamb": (7, 3), "Lion": (5, 0),
    "NAdam": (7, 0), "Rprop": (7, 0), "SGDScheduleFree": (5, 0),
}  # fmt: skip
LR = {"Lion": 1e-4, "Lamb": 1e-3, "Adafactor": 1e-2}
TORCH = "torch"


def run_with(way: str, builds: dict[str, _native.NativeKernels]) -> None:
    """Make the next steps run ``way``: a build's kernels, or the torch path."""
    if way == TORCH:
        _native.set_enabled(False)
        return
    _native.use(builds[way])
    _native.set_enabled(True)


def build(
    name: str, shape: str, way: str, builds: dict[str, _native.NativeKernels]
) -> torch.optim.Optimizer:
    gen = torch.Generator().manual_seed(0)
    params = []
    for dims in SHAPES[shape]:
        p = torch.nn.Parameter(torch.randn(dims, generator=gen) * 0.02)
        p.grad = torch.randn(dims, generator=gen) * 1e-3
        params.append(p)
    run_with(way, builds)
    optimizer = plugtrain.resolve("optimizer", name)(params, lr=LR.get(name, 0.01))
    tuner = getattr(optimizer, "_tuner", None)
    if tuner is not None and way != TORCH:
        tuner.torch_path = False  # time the kernels, not the tuner's pick between them and torch
    return optimizer


def floor_bytes(name: str, optimizer: torch.optim.Optimizer) -> int:
    total = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            one, extra = FLOOR[f"{name} 1-D" if name == "Adafactor" and p.dim() < 2 else name]
            size = p.numel() * p.element_size()
            total += (one + (extra if size > 256 * 1024 else 0)) * size
    return total


def measure(
    name: str,
    shape: str,
    reps: int,
    copy: tuple[torch.Tensor, torch.Tensor],
    builds: dict[str, _native.NativeKernels],
) -> list[float]:
    """Print one row; return each build's ratio to the torch path (none if no kernel ran)."""
    src, dst = copy
    evict = shape in EVICTED
    ways = [*builds, TORCH]
    optimizers = {way: build(name, shape, way, builds) for way in ways}
    times: dict[str, list[float]] = {way: [] for way in ways}
    copies: list[float] = []
    for way, opt in optimizers.items():  # warm: state, scratch and the tuner's first plans
        run_with(way, builds)
        for _ in range(6):
            opt.step()
    calls = _native.calls()
    for _ in range(reps):
        for way, opt in optimizers.items():
            run_with(way, builds)
            if evict:
                start = time.perf_counter()
                dst.copy_(src)
                copies.append(time.perf_counter() - start)
            start = time.perf_counter()
            opt.step()
            times[way].append(time.perf_counter() - start)
    ran_kernels = _native.calls() != calls
    run_with(TORCH, builds)
    medians = {way: statistics.median(times[way]) for way in ways}
    ratios = [medians[way] / medians[TORCH] for way in builds]
    line = f"{shape:5} {name:18}"
    for way in ways:
        line += f" {way} {medians[way] * 1e3:7.2f} ms"
    line += "  = " + " ".join(f"{r:4.2f}x" for r in ratios)
    if evict:
        bandwidth = 2 * src.numel() * src.element_size() / statistics.median(copies)
        floor = floor_bytes(name, optimizers[TORCH]) / bandwidth
        line += f"   floor {floor * 1e3:6.2f} ms: "
        line += " ".join(f"{medians[way] / floor:4.2f}x" for way in ways)
    if not ran_kernels:
        line += "   (no kernel ran: the same torch path three times)"
    print(line, flush=True)
    return ratios if ran_kernels else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    builds = {}
    for march in args.targets.split(","):
        try:
            builds[march] = _native.build_for(march)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc
        path = str(builds[march].path).replace(os.path.expanduser("~"), "~")
        print(f"-march={march}: {path} ({' '.join(builds[march].flags)})")
    src = torch.randn(64 * 2**20)
    copy = (src, torch.empty_like(src))
    print(f"{args.threads} threads; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("ratios: each build's step / the torch path's step")
    worst = 0.0
    for shape in args.shapes.split(","):
        for name in args.rows.split(","):
            worst = max([worst, *measure(name, shape, args.reps, copy, builds)])
    after = os.getloadavg()
    print(f"worst ratio {worst:.2f}x (goal <= 1.0x)")
    print(f"load average {load[0]:.2f} before, {after[0]:.2f} after")


if __name__ == "__main__":
    main()
