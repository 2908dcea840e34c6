"""Sparsity cost: a masked optimizer step and a mask update vs an unmasked step, side by side.

The built-in MLP (``--hidden`` wide, 2 hidden layers: about 2.2M weights at 1024), AdamW,
random batches of 64. Its three weights are sparsified at 75% by plugtrain's core
(:mod:`plugtrain.train.loop.sparsity`), through the same hooks a fit uses. Timed, interleaved,
median of ``--repeats`` rounds of ``--steps`` each:

- ``optimizer.step()`` alone, unmasked, and masked (the core's pre- and post-step hooks zero
  the weights and the Adam moments where masked); the same with SGD and momentum, whose step
  has no square root (torch's CPU ``sqrt`` is several times slower on zeros, and 75% of a
  sparse weight's Adam moments are zeros, so AdamW itself slows down on sparse weights);
- a whole training step (zero_grad, forward, backward, optimizer step) unmasked, masked with
  ``Static`` (no update) and masked with ``RigL`` / ``SET`` updating the masks every step
  (drop by magnitude, regrow by gradient / at random: the cost of an update step);
- one mask update on its own (``Sparsity.step_end`` at an update step: the algorithm's
  ``update_masks`` and writing the masks into weights and optimizer state).

Ratios are against the unmasked optimizer step or the unmasked training step.

Run: ``python bench/sparsity.py [--repeats 5] [--steps 20] [--hidden 1024] [--clock wall|cpu]``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from plugtrain.builtin.models import MLP
from plugtrain.train.loop.sparsity import Sparsity, SparsityGroup
from plugtrain_sparsity.rigl import RigL
from plugtrain_sparsity.set import SET
from plugtrain_sparsity.static import Static

clock = time.perf_counter


def _setup(
    hidden: int, algorithm: Any, sgd: bool = False
) -> tuple[torch.nn.Module, Any, Sparsity | None]:
    torch.manual_seed(0)
    model = MLP(in_features=256, out_features=10, hidden=hidden, depth=2)
    sparsity = None
    if algorithm is not None:
        sparsity = Sparsity([SparsityGroup(algorithm)], model, seed=0)
    if sgd:
        optimizer: Any = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if sparsity is not None:
        sparsity.attach_optimizer(optimizer)
        sparsity.initialize()
    return model, optimizer, sparsity


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(64, 256, generator=generator), torch.randint(
        0, 10, (64,), generator=generator
    )


def _train_step(model: Any, optimizer: Any, sparsity: Sparsity | None, batch: Any) -> None:
    optimizer.zero_grad(set_to_none=True)
    if sparsity is not None:
        sparsity.step_start()
    inputs, targets = batch
    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    optimizer.step()
    if sparsity is not None:
        sparsity.step_end()


def _timed(function: Callable[[], None], steps: int) -> float:
    start = clock()
    for _ in range(steps):
        function()
    return (clock() - start) / steps * 1e3


def main() -> None:
    """Print per-step times and ratios."""
    global clock  # noqa: PLW0603 - as bench/loop.py: one clock for every timed case
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    options = parser.parse_args()
    clock = time.process_time if options.clock == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    batch = _batch()
    every = {"update": {"freq": 1}, "drop_fraction": 0.3}

    def static(p: Any) -> Any:
        return Static(p, 0.75)

    def rigl(p: Any) -> Any:
        return RigL(p, 0.75, **every)

    def set_(p: Any) -> Any:
        return SET(p, 0.75, **every)

    setups = {
        "unmasked": _setup(options.hidden, None),
        "Static": _setup(options.hidden, static),
        "RigL": _setup(options.hidden, rigl),
        "SET": _setup(options.hidden, set_),
        "SGD unmasked": _setup(options.hidden, None, sgd=True),
        "SGD Static": _setup(options.hidden, static, sgd=True),
    }
    for model, optimizer, sparsity in setups.values():  # optimizer state exists from here on
        for _ in range(2):
            _train_step(model, optimizer, sparsity, batch)

    def optimizer_step(name: str) -> Callable[[], None]:
        return setups[name][1].step

    def train_step(name: str) -> Callable[[], None]:
        model, optimizer, sparsity = setups[name]
        return lambda: _train_step(model, optimizer, sparsity, batch)

    def mask_update(name: str) -> Callable[[], None]:
        sparsity = setups[name][2]
        assert sparsity is not None

        def update() -> None:
            sparsity._stepped = True  # as after an applied optimizer step
            sparsity.step_end()

        return update

    cases: dict[str, Callable[[], None]] = {
        "optimizer step, unmasked": optimizer_step("unmasked"),
        "optimizer step, masked": optimizer_step("Static"),
        "SGD momentum step, unmasked": optimizer_step("SGD unmasked"),
        "SGD momentum step, masked": optimizer_step("SGD Static"),
        "train step, unmasked": train_step("unmasked"),
        "train step, Static": train_step("Static"),
        "train step, RigL updating every step": train_step("RigL"),
        "train step, SET updating every step": train_step("SET"),
        "mask update alone, RigL": mask_update("RigL"),
        "mask update alone, SET": mask_update("SET"),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(options.repeats):
        for name, function in cases.items():
            times[name].append(_timed(function, options.steps))
    weights = sum(p.param.numel() for p in setups["Static"][2].parameters)  # type: ignore[union-attr]
    print(
        f"{platform.machine()}, torch {torch.__version__}, 1 thread, {weights} sparse weights "
        f"(75%), AdamW, batch 64, median of {options.repeats} x {options.steps} steps, "
        f"{options.clock} clock"
    )
    print("| case | ms | x unmasked optimizer step | x unmasked train step |")
    print("|---|---|---|---|")
    median = {name: statistics.median(values) for name, values in times.items()}
    base_optimizer = median["optimizer step, unmasked"]
    base_train = median["train step, unmasked"]
    for name, value in median.items():
        print(f"| {name} | {value:.3f} | {value / base_optimizer:.2f} | {value / base_train:.2f} |")


if __name__ == "__main__":
    main()
