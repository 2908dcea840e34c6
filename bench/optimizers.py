"""Per-step time of the plugtrain optimizers against torch.optim, third-party packages and memory.

Two shapes: ``large`` (~25M parameters in 4 tensors) and ``many`` (400 tensors of 10,000).
Contestants of one optimizer are timed interleaved (one step each, round robin) so that machine
noise hits them alike; the table gives medians. "x floor" divides the step time by the time
the measured memory-copy bandwidth needs for the bytes the algorithm must read and write
(parameter-sized tensors touched per step x element size). Third-party packages
(pytorch-optimizer, lion-pytorch) are used when installed and skipped otherwise.

    python bench/optimizers.py [--reps 5] [--only Adam Lion] [--write bench/optimizers.md]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

import plugtrain

SHAPES = {
    "large": [(4096, 2048), (4096, 2048), (2048, 2048), (2048, 2048)],
    "many": [(100, 100)] * 400,
}

# Parameter-sized tensors read + written by one step at the least (p, g, state; p, state).
TOUCHED = {
    "SGD": 5, "Adam": 7, "AdamW": 7, "Adamax": 7, "Adadelta": 7, "Adagrad": 5, "ASGD": 5,
    "NAdam": 7, "RAdam": 7, "RMSprop": 5, "Rprop": 7, "Lamb": 7, "Lion": 5, "Adafactor": 3,
    "Muon": 5,
}  # fmt: skip

OURS = {"SGD": {"lr": 0.01, "momentum": 0.9}, "Adafactor": {"lr": 0.01}}
TORCH_ARGS = {"SGD": {"lr": 0.01, "momentum": 0.9}, "Adafactor": {"lr": 0.01}}
THIRD_PARTY: dict[str, list[tuple[str, str, dict]]] = {
    "Lamb": [("pytorch_optimizer", "Lamb", {})],
    "Lion": [("pytorch_optimizer", "Lion", {}), ("lion_pytorch", "Lion", {})],
    "Adafactor": [("pytorch_optimizer", "AdaFactor", {"lr": 0.01})],
    "RAdam": [("pytorch_optimizer", "RAdam", {})],
    "Muon": [("pytorch_optimizer", "Muon", {})],
}


def make_params(shape: str) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    params = []
    for dims in SHAPES[shape]:
        p = torch.nn.Parameter(torch.randn(dims, generator=gen) * 0.02)
        p.grad = torch.randn(dims, generator=gen) * 1e-3
        params.append(p)
    return params


def copy_bandwidth() -> float:
    """Bytes per second moved by a large tensor copy (read + write)."""
    src = torch.randn(64 * 2**20)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(10):
        start = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * src.element_size() / min(times)


def contestants(name: str, shape: str) -> dict[str, Callable[[], torch.optim.Optimizer]]:
    ours = plugtrain.resolve("optimizer", name)
    found: dict[str, Callable[[], torch.optim.Optimizer]] = {
        "plugtrain": lambda: ours(make_params(shape), **OURS.get(name, {}))
    }
    if name == "Muon":
        found["plugtrain ns_dtype=bfloat16"] = lambda: ours(make_params(shape), ns_dtype="bfloat16")
    theirs = getattr(torch.optim, name, None)
    if theirs is not None:
        kwargs = {**TORCH_ARGS.get(name, {}), "foreach": True}
        found["torch foreach"] = lambda: theirs(make_params(shape), **kwargs)
        if name in ("Adam", "AdamW"):
            found["torch fused"] = lambda: theirs(make_params(shape), fused=True)
    for module_name, attribute, kwargs in THIRD_PARTY.get(name, []):
        try:
            cls = getattr(importlib.import_module(module_name), attribute)
        except ImportError:
            continue
        found[module_name] = lambda cls=cls, kwargs=kwargs: _third_party(cls, shape, kwargs)
    return found


def _third_party(cls: type, shape: str, kwargs: dict) -> torch.optim.Optimizer:
    if cls.__name__ == "Muon":  # pytorch-optimizer's Muon wants groups marked use_muon
        return cls([{"params": make_params(shape), "use_muon": True}], **kwargs)
    return cls(make_params(shape), **kwargs)


def time_steps(optimizers: dict[str, torch.optim.Optimizer], reps: int) -> dict[str, float]:
    times: dict[str, list[float]] = {label: [] for label in optimizers}
    for opt in optimizers.values():
        opt.step()  # warm-up: lazy buffers, first-step branches
    for _ in range(reps):
        for label, opt in optimizers.items():
            start = time.perf_counter()
            opt.step()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) for label, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--only", nargs="*", default=[], help="optimizer names (space or comma separated)"
    )
    parser.add_argument("--write", default="")
    args = parser.parse_args()
    only = [n for arg in args.only for n in arg.split(",") if n]
    names = only or plugtrain.names("optimizer")
    bandwidth = copy_bandwidth()
    rows = []
    for shape, dims in SHAPES.items():
        numel = sum(a * b for a, b in dims)
        for name in names:
            built = {label: make() for label, make in contestants(name, shape).items()}
            reps = 2 if name == "Muon" and shape == "large" else args.reps
            medians = time_steps(built, reps)
            del built
            floor = TOUCHED[name] * numel * 4 / bandwidth
            ours = medians["plugtrain"]
            others = ", ".join(
                f"{label} {t * 1e3:.1f} ms ({t / ours:.2f}x)"
                for label, t in medians.items()
                if label != "plugtrain"
            )
            rows.append(
                f"| {shape} | {name} | {ours * 1e3:.1f} | {ours / floor:.1f} | {others or '-'} |"
            )
            print(rows[-1], flush=True)
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"copy bandwidth {bandwidth / 1e9:.1f} GB/s"
    )
    table = "\n".join(
        [
            f"Machine: {machine}. Shapes: large = 25.2M float32 parameters in 4 tensors; "
            "many = 400 tensors of 10,000. Median of interleaved steps; (Nx) = their time / ours.",
            "",
            "| shape | optimizer | plugtrain ms/step | x floor | others (ms/step, ratio to ours) |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        with open(args.write, "w", encoding="utf-8") as out:
            out.write("# Optimizer benchmark (`bench/optimizers.py`)\n\n" + table + "\n")


if __name__ == "__main__":
    main()
