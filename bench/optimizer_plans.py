"""Optimizer steps under each CPU plan, the tuned default, the memory floor and the arithmetic.

For each optimizer row (plugtrain's, default constructor path, the acceptance shapes: ``large``
= 4096x4096, 4096, 4096x2048, 2048 float32; ``many`` = 400 tensors of 100x100) this times, in
one process and interleaved round robin with a 256 MiB ``Tensor.copy_`` before every step (as
forward and backward evict the optimizer's tensors in training):

- the step under each fixed plan :class:`plugtrain_optimizers._threads.StepTuner` chooses
  between: all threads and one thread, each with the C kernels (where the optimizer has them)
  and on the torch-operation path (the same step where it has none);
- the tuned step (``PLUGTRAIN_TUNE_THREADS=1``, set here: the tuner choosing by step times);
- the memory floor: the copy's bandwidth times the bytes the update must move (the acceptance
  script's counts, :data:`FLOOR_TENSORS`);
- the arithmetic alone: the default step on a copy of the shape small enough to stay in the
  last-level cache between steps (1/``--shrink`` of it: the rows of each large tensor, or of
  the many tensors; no copy before the step), scaled back up by elements. Above the goal, the
  row is bound by compute here.

Medians of ``--reps`` rounds; ratios are to the floor. Run on a quiet machine if you can; the
load average before and after is printed.

    python bench/optimizer_plans.py [--rows Lion,Rprop] [--shapes large,many] [--reps 7]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from typing import Any

import torch

import plugtrain
from plugtrain_optimizers._threads import TUNE_VARIABLE, Plan, StepTuner

os.environ.setdefault(TUNE_VARIABLE, "1")  # the optimizers made here carry a tuner

ROWS = [
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "AdamW", "AdamWScheduleFree", "Adamax", "Lamb",
    "Lion", "NAdam", "RMSprop", "Rprop", "SGDScheduleFree",
]  # fmt: skip
# Parameter-sized float32 tensors one step reads plus writes, (one pass, re-reads of a tensor
# larger than RESIDENT bytes), as the acceptance script counts them.
FLOOR_TENSORS = {
    "ASGD": (4, 0), "Adadelta": (7, 0), "Adafactor": (3, 3), "Adafactor 1-D": (5, 3),
    "Adagrad": (5, 0), "AdamW": (7, 0), "AdamWScheduleFree": (7, 0), "SGDScheduleFree": (5, 0),
    "Adamax": (7, 0), "Lamb": (7, 3), "Lion": (5, 0), "NAdam": (7, 0), "RMSprop": (5, 0),
    "Rprop": (7, 0),
}  # fmt: skip
RESIDENT = 256 * 1024
SHAPES = {"large": [(4096, 4096), (4096,), (4096, 2048), (2048,)], "many": [(100, 100)] * 400}
GOALS = {"large": 1.5, "many": 3.0}


def floor_tensors(name: str, p: torch.Tensor) -> int:
    """Parameter-sized tensors of ``p`` one step moves at the least."""
    key = f"{name} 1-D" if name == "Adafactor" and p.dim() < 2 else name
    one, extra = FLOOR_TENSORS[key]
    return one + (extra if p.numel() * p.element_size() > RESIDENT else 0)


def make(name: str, dims: list[tuple[int, ...]], shrink: int = 1) -> Any:
    """The optimizer ``name`` on fresh parameters of ``dims``, 1/``shrink`` of them.

    Shrunk, a list of many equal tensors keeps 1/``shrink`` of the tensors (so that per-tensor
    costs scale too); other lists keep every tensor with 1/``shrink`` of its rows.
    """
    gen = torch.Generator().manual_seed(0)
    params = []
    if shrink > 1 and len(set(dims)) == 1:
        dims, shrink = dims[: max(1, len(dims) // shrink)], 1
    for d in dims:
        d = (max(1, d[0] // shrink), *d[1:])  # noqa: PLW2901
        p = torch.nn.Parameter(torch.randn(d, generator=gen) * 0.02)
        p.grad = torch.randn(d, generator=gen) * 1e-3
        params.append(p)
    cls = plugtrain.resolve("optimizer", name)
    kwargs = {"lr": 0.01} if name == "Adafactor" else {}
    return cls(params, **kwargs), params


class FixedPlan:
    """Steps an optimizer under one plan: the tuner's ``choose`` answered with ``plan``."""

    def __init__(self, optimizer: Any, plan: Plan) -> None:
        self.optimizer, self.plan = optimizer, plan

    def step(self) -> None:
        tuner: StepTuner = self.optimizer._tuner
        original = tuner.choose
        tuner.choose = lambda threads: (self.plan, False)  # type: ignore[method-assign]
        try:
            self.optimizer.step()
        finally:
            tuner.choose = original  # type: ignore[method-assign]


def row(name: str, shape: str, reps: int, shrink: int, threads: int) -> str:
    """One Markdown row: times under each plan and the default, floor, arithmetic alone."""
    src = torch.randn(64 * 2**20)
    dst = torch.empty_like(src)
    contestants: dict[str, Any] = {}
    plans = {
        "all threads": Plan(threads),
        "one thread": Plan(1),
        "all threads, torch path": Plan(threads, kernels=False),
        "one thread, torch path": Plan(1, kernels=False),
    }
    for label, plan in plans.items():
        contestants[label] = FixedPlan(make(name, SHAPES[shape])[0], plan)
    default, params = make(name, SHAPES[shape])
    contestants["default (tuned)"] = default
    times: dict[str, list[float]] = {label: [] for label in contestants}
    copies = []
    for opt in contestants.values():  # state, scratch, the tuner's first tries
        for _ in range(4):
            opt.step()
    for rep in range(reps):
        labels = list(contestants)
        labels = labels[rep % len(labels) :] + labels[: rep % len(labels)]
        for label in labels:
            start = time.perf_counter()
            dst.copy_(src)
            copies.append(time.perf_counter() - start)
            start = time.perf_counter()
            contestants[label].step()
            times[label].append(time.perf_counter() - start)
    bandwidth = 2 * src.numel() * src.element_size() / statistics.median(copies)
    floor = sum(floor_tensors(name, p) * p.numel() * p.element_size() for p in params) / bandwidth
    small, small_params = make(name, SHAPES[shape], shrink)
    for _ in range(4):
        small.step()
    in_cache = []
    for _ in range(reps):
        start = time.perf_counter()
        small.step()
        in_cache.append(time.perf_counter() - start)
    scale = sum(p.numel() for p in params) / sum(p.numel() for p in small_params)
    arithmetic = statistics.median(in_cache) * scale
    cells = [f"{statistics.median(v) * 1e3:.1f} ({statistics.median(v) / floor:.2f})"
             for v in times.values()]  # fmt: skip
    chosen = getattr(default._tuner, "chosen", None)
    return (
        f"| {shape} | {name} | {' | '.join(cells)} | {chosen and tuple(chosen)} | "
        f"{floor * 1e3:.1f} | {arithmetic / floor:.2f} | {GOALS[shape]} |"
    )


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--shapes", default="large,many")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--shrink", type=int, default=16, help="in-cache shape: 1/N of each")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started, load = time.perf_counter(), os.getloadavg()[0]
    print(
        "| shape | optimizer | all threads ms (x floor) | one thread | all threads, torch path | "
        "one thread, torch path | default (tuned) | tuner's choice (threads, kernels) | "
        "floor ms | arithmetic alone x floor | goal |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        for name in args.rows.split(","):
            print(row(name, shape, args.reps, args.shrink, args.threads), flush=True)
            gc.collect()
    print(
        f"\n{args.threads} threads, {time.perf_counter() - started:.0f} s, load average "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )


if __name__ == "__main__":
    main()
