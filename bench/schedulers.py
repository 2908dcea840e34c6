"""Per-step cost of plugtrain's schedulers against torch.optim.lr_scheduler.

Run: .venv/bin/python bench/schedulers.py [--steps 10000] [--repeats 7]

Each pair (ours, torch's equivalent) steps an optimizer with 4 param groups; the pairs are run
interleaved, repeat after repeat, and the median per-step time is reported with the ratio
ours / torch. A second table compares the cost of a step at step 10 and at step 1,000,000.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.optim import lr_scheduler as ts

import plugtrain

GROUPS = 4


def optimizer() -> torch.optim.SGD:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))]} for _ in range(GROUPS)]
    return torch.optim.SGD(groups, lr=0.1)


def ours(name: str, **arguments: Any) -> Callable[[], Any]:
    cls = plugtrain.resolve("scheduler", name)
    return lambda: cls(optimizer(), **arguments)


def theirs(make: Callable[[torch.optim.Optimizer], Any]) -> Callable[[], Any]:
    return lambda: make(optimizer())


LINEAR = {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 1000}
COSINE = {"initial_learning_rate": 0.1, "T_max": 9000, "eta_min": 1e-5}
PAIRS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "CosineAnnealingLR": (
        ours("CosineAnnealingLR", **COSINE),
        theirs(lambda o: ts.CosineAnnealingLR(o, T_max=9000, eta_min=1e-5)),
    ),
    "LinearLR": (
        ours("LinearLR", **LINEAR),
        theirs(lambda o: ts.LinearLR(o, start_factor=1e-8, end_factor=1.0, total_iters=1000)),
    ),
    "SequentialLR (linear then cosine)": (
        ours(
            "SequentialLR",
            schedulers=[{"LinearLR": LINEAR}, {"CosineAnnealingLR": COSINE}],
        ),
        theirs(
            lambda o: ts.SequentialLR(
                o,
                [
                    ts.LinearLR(o, start_factor=1e-8, end_factor=1.0, total_iters=1000),
                    ts.CosineAnnealingLR(o, T_max=9000, eta_min=1e-5),
                ],
                milestones=[1000],
            )
        ),
    ),
    "OneCycleLR": (
        ours(
            "OneCycleLR",
            initial_learning_rate=0.004,
            max_lr=0.1,
            total_steps=10_001,
        ),
        theirs(lambda o: ts.OneCycleLR(o, max_lr=0.1, total_steps=10_001, cycle_momentum=False)),
    ),
}


def time_steps(make: Callable[[], Any], steps: int) -> float:
    """Seconds per ``step()`` over ``steps`` steps (the optimizer's own step excluded)."""
    scheduler = make()
    opt = scheduler.optimizer
    # torch's schedulers check that optimizer.step() ran first; mark it once, as a loop would.
    opt.step()
    step = scheduler.step
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def per_step_table(steps: int, repeats: int) -> list[str]:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):
        for label, (mine, torch_one) in PAIRS.items():
            samples.setdefault((label, "ours"), []).append(time_steps(mine, steps))
            samples.setdefault((label, "torch"), []).append(time_steps(torch_one, steps))
    header = f"| scheduler ({GROUPS} groups, {steps} steps) | plugtrain µs/step"
    rows = [header + " | torch µs/step | ratio |", "|---|---:|---:|---:|"]
    for label in PAIRS:
        mine = statistics.median(samples[(label, "ours")]) * 1e6
        them = statistics.median(samples[(label, "torch")]) * 1e6
        rows.append(f"| {label} | {mine:.2f} | {them:.2f} | {mine / them:.2f}x |")
    return rows


def position_table(steps: int, repeats: int) -> list[str]:
    """Cost of steps taken right after step 10 and right after step 1,000,000."""
    rows = ["| scheduler | µs/step after step 10 | µs/step after step 1,000,000 | ratio |"]
    rows.append("|---|---:|---:|---:|")
    many = [
        {"ConstantLR": {"learning_rate": float(i), "total_iters": 10_000}} for i in range(1, 201)
    ]
    cases = {
        "CosineAnnealingLR": ours("CosineAnnealingLR", **COSINE),
        "CosineAnnealingWarmRestarts (T_mult=2)": ours(
            "CosineAnnealingWarmRestarts", initial_learning_rate=0.1, T_0=10, T_mult=2
        ),
        "SequentialLR (200 children)": ours("SequentialLR", schedulers=many),
        "MultiStepLR (100 milestones)": ours(
            "MultiStepLR",
            initial_learning_rate=0.1,
            gamma=0.99,
            milestones=[10_000 * i for i in range(1, 101)],
        ),
    }
    for label, make in cases.items():
        timings: dict[int, list[float]] = {10: [], 1_000_000: []}
        for _ in range(repeats):
            for position, found in timings.items():
                scheduler = make()
                scheduler.load_state_dict({"last_step": position})
                start = time.perf_counter()
                for _ in range(steps):
                    scheduler.step()
                found.append((time.perf_counter() - start) / steps)
        early = statistics.median(timings[10]) * 1e6
        late = statistics.median(timings[1_000_000]) * 1e6
        rows.append(f"| {label} | {early:.2f} | {late:.2f} | {late / early:.2f}x |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"machine: {platform.processor() or platform.machine()}, {platform.system()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}\n"
    )
    print("\n".join(per_step_table(options.steps, options.repeats)))
    print()
    print("\n".join(position_table(options.steps, options.repeats)))


if __name__ == "__main__":
    main()
