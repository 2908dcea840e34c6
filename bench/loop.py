"""Trainer overhead: plugtrain's Trainer vs a hand-written PyTorch loop doing the same work.

Same model (the built-in MLP), data (the built-in digits), optimizer (SGD with momentum),
scheduler (LinearLR) and logging cadence (metrics every 50 steps to a JSON-lines file). The
per-step time is the slope between a short and a long run, so fixed costs (start-up, the final
checkpoint) cancel; runs are interleaved. PyTorch Lightning is measured too when it imports.

Three times: in full precision; with ``precision: {fp16_type: bfloat16, max_gradient_norm: 1.0}``
(bfloat16 autocast for the forward pass and the loss, clipping to a total norm of 1, the
pre-clip norm in the metrics), against a hand loop doing the same (``torch.autocast``,
``clip_grad_norm_``, the norm's window mean in its log); and that with the ``ComputeNorm``
callback (plugtrain-callbacks) and the default loggers (JSON lines and CSV) against a hand loop
that also computes the gradients' and the weights' norms at each logged step and writes both
files. ``--callback NAME`` (repeatable) adds
registered callbacks to the precision Trainer (e.g. ``ComputeNorm``); the hand loop does not
mirror them, so the ratio then includes their cost.

``--clock cpu`` times the loops with this process's CPU time instead of the wall clock:
steadier on a machine shared with other work (the loops are single-threaded).

``--workload gpt`` measures plugtrain-models' GPT instead (the model, data and precision of
``examples/gpt.yaml``: StdlibText batches of 16 x 64 bytes, AdamW, bfloat16 autocast, clipping
to 1.0) in tokens per second: ``Trainer.fit`` against a hand loop doing the same work (the same
model, data, optimizer, schedule, autocast and clipping, and a JSON-lines log of the window's
loss, accuracy, learning rate and gradient norm every 50 steps).

Run: ``python bench/loop.py [--repeats 5] [--steps 200 1200] [--callback ComputeNorm]
[--clock wall|cpu] [--workload mlp|gpt]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import plugtrain
from plugtrain.builtin.data import digits_loader
from plugtrain.builtin.models import MLP
from plugtrain.builtin.text import stdlib_text_loader
from plugtrain.train.trainer import Trainer

LOG_STEPS = 50
clock = time.perf_counter
MAX_NORM = 1.0
PRECISION = {"fp16_type": "bfloat16", "max_gradient_norm": MAX_NORM}


def _components():
    sgd = plugtrain.resolve("optimizer", "SGD")
    linear = plugtrain.resolve("scheduler", "LinearLR")
    torch.manual_seed(0)
    model = MLP(in_features=64, out_features=10, hidden=128)
    optimizer = sgd(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = linear(
        optimizer, initial_learning_rate=0.05, end_learning_rate=0.001, total_iters=10_000
    )
    return model, optimizer, scheduler


def _vector_norm(tensors: list[torch.Tensor]) -> float:
    return float(
        torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))
    )


def _write(record: dict[str, float], log: Any, table: Any) -> None:
    log.write(json.dumps(record) + "\n")
    log.flush()
    if table is not None:
        table.write(",".join(str(value) for value in record.values()) + "\n")
        table.flush()


def hand_loop(steps: int, directory: Path, precision: bool = False, norms: bool = False) -> float:
    """The loop a careful person writes by hand; returns seconds for ``steps`` steps.

    :param precision: bfloat16 autocast and clipping to ``MAX_NORM``, the norm logged.
    :param norms: at logged steps also the clipped gradients' and the weights' norms (what
        ``ComputeNorm`` logs), and every record also as a CSV row (what the default
        ``MetricsFilesLogger`` writes besides JSON lines).
    """
    model, optimizer, scheduler = _components()
    parameters = list(model.parameters())
    norm_sum = 0.0
    loader = digits_loader(batch_size=64)
    log = (directory / "hand.jsonl").open("w")
    table = (directory / "hand.csv").open("w") if norms else None
    start = clock()
    iterator = iter(loader)
    window = 0.0
    correct = count = 0
    for step in range(1, steps + 1):
        try:
            inputs, targets = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            inputs, targets = next(iterator)
        optimizer.zero_grad(set_to_none=True)
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16) if precision else contextlib.nullcontext()
        )
        with autocast:
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, targets)
        loss.backward()
        if precision:
            norm_sum += float(torch.nn.utils.clip_grad_norm_(parameters, MAX_NORM))
        logged = step % LOG_STEPS == 0
        if norms and logged:
            grad_norm = _vector_norm([p.grad for p in parameters if p.grad is not None])
        optimizer.step()
        scheduler.step()
        window += float(loss.detach())
        correct += int((outputs.argmax(dim=-1) == targets).sum())
        count += targets.numel()
        if step % LOG_STEPS == 0:
            record = {
                "step": step,
                "loss": window / LOG_STEPS,
                "accuracy": correct / count,
                "lr": optimizer.param_groups[0]["lr"],
            }
            if precision:
                record["grad_norm"] = norm_sum / LOG_STEPS
                norm_sum = 0.0
            if norms:
                record["model_wise_grad_norm"] = grad_norm
                with torch.no_grad():
                    record["model_wise_params_norm"] = _vector_norm(parameters)
            _write(record, log, table)
            window = 0.0
            correct = count = 0
    elapsed = clock() - start
    log.close()
    if table is not None:
        table.close()
    return elapsed


def trainer_loop(
    steps: int,
    directory: Path,
    precision: dict[str, Any] | None = None,
    callbacks: Sequence[Any] = (),
) -> float:
    """The same work through ``Trainer.fit``; returns seconds for the whole fit.

    :param precision: the Trainer's precision settings (``None``: full precision).
    :param callbacks: callback objects for the Trainer.
    """
    model, optimizer, scheduler = _components()
    from plugtrain.backend_base import release_backend_type

    release_backend_type()
    trainer = Trainer(
        device="CPU",
        model_dir=directory / f"trainer{steps}",
        model=model,
        optimizer=optimizer,
        schedulers=[scheduler],
        loop={"max_steps": steps},
        logging={"log_steps": LOG_STEPS, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
        precision=precision,
        callbacks=list(callbacks),
    )
    loader = digits_loader(batch_size=64)
    start = clock()
    trainer.fit(loader)
    return clock() - start


GPT_BATCH, GPT_BLOCK = 16, 64


def _gpt_components():
    adamw = plugtrain.resolve("optimizer", "AdamW")
    cosine = plugtrain.resolve("scheduler", "CosineDecayLR")
    torch.manual_seed(0)
    model = plugtrain.resolve("model", "GPT")(n_layer=2, n_head=4, n_embd=64, block_size=GPT_BLOCK)
    optimizer = adamw(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    scheduler = cosine(
        optimizer, initial_learning_rate=3e-3, end_learning_rate=3e-4, total_iters=10_000
    )
    loader = stdlib_text_loader(batch_size=GPT_BATCH, block_size=GPT_BLOCK, drop_last=True)
    return model, optimizer, scheduler, loader


def gpt_hand_loop(steps: int, directory: Path) -> float:
    """The GPT steps of ``examples/gpt.yaml`` by hand; returns seconds for ``steps`` steps."""
    model, optimizer, scheduler, loader = _gpt_components()
    parameters = list(model.parameters())
    log = (directory / "gpt_hand.jsonl").open("w")
    torch.manual_seed(1)
    start = clock()
    iterator = iter(loader)
    window = accuracy = norm_sum = 0.0
    for step in range(1, steps + 1):
        try:
            batch = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            batch = next(iterator)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            result = model(batch)
        result["loss"].backward()
        norm_sum += float(torch.nn.utils.clip_grad_norm_(parameters, MAX_NORM))
        optimizer.step()
        scheduler.step()
        window += float(result["loss"].detach())
        accuracy += float(result["accuracy"])
        if step % LOG_STEPS == 0:
            record = {
                "step": step,
                "loss": window / LOG_STEPS,
                "accuracy": accuracy / LOG_STEPS,
                "lr": optimizer.param_groups[0]["lr"],
                "grad_norm": norm_sum / LOG_STEPS,
            }
            _write(record, log, None)
            window = accuracy = norm_sum = 0.0
    elapsed = clock() - start
    log.close()
    return elapsed


def gpt_trainer_loop(steps: int, directory: Path) -> float:
    """The same GPT work through ``Trainer.fit``; returns seconds for the whole fit."""
    model, optimizer, scheduler, loader = _gpt_components()
    from plugtrain.backend_base import release_backend_type

    release_backend_type()
    trainer = Trainer(
        device="CPU",
        model_dir=directory / f"gpt_trainer{steps}",
        model=model,
        optimizer=optimizer,
        schedulers=[scheduler],
        loop={"max_steps": steps},
        logging={"log_steps": LOG_STEPS, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
        precision=PRECISION,
    )
    torch.manual_seed(1)
    start = clock()
    trainer.fit(loader)
    return clock() - start


def gpt_main(repeats: int, short: int, long: int, clock_name: str) -> None:
    """Tokens per second of the GPT pair, printed as a Markdown table."""
    loops = {"hand-written loop, GPT": gpt_hand_loop, "plugtrain Trainer, GPT": gpt_trainer_loop}
    per_step: dict[str, list[float]] = {name: [] for name in loops}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for name, loop in loops.items():
                first = loop(short, Path(tmp))
                second = loop(long, Path(tmp))
                per_step[name].append((second - first) / (long - short))
    print(
        f"# GPT loop benchmark\n\n{platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, 1 intra-op thread, {clock_name} clock, median of {repeats}, "
        f"slope between {short} "
        f"and {long} steps of {GPT_BATCH} x {GPT_BLOCK} tokens\n"
    )
    print("| loop | ms per step | tokens per second | x hand loop (time) |")
    print("|---|---|---|---|")
    hand = statistics.median(per_step["hand-written loop, GPT"])
    for name, samples in per_step.items():
        median = statistics.median(samples)
        tokens = GPT_BATCH * GPT_BLOCK / median
        print(f"| {name} | {median * 1e3:.1f} | {tokens:.0f} | {median / hand:.3f} |")


def lightning_loop(steps: int, directory: Path) -> float | None:
    """The same work through Lightning's Trainer, or ``None`` when Lightning does not import."""
    try:
        import lightning as pl
    except Exception:  # noqa: BLE001 - any import failure means "not available here"
        return None
    model, optimizer, scheduler = _components()

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _index):
            inputs, targets = batch
            outputs = self.model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, targets)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
            }

    trainer = pl.Trainer(
        max_steps=steps,
        log_every_n_steps=LOG_STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(directory),
    )
    start = clock()
    trainer.fit(Module(), digits_loader(batch_size=64))
    return clock() - start


def startup_to_first_step(directory: Path) -> float:
    """Seconds from a cold ``plugtrain fit`` to its first logged step (log_steps 1)."""
    run = directory / "startup.yaml"
    # A fresh model_dir each time: in the same one, the next run resumes at its last step.
    model_dir = tempfile.mkdtemp(prefix="startup", dir=directory)
    run.write_text(
        "trainer:\n  init:\n    device: CPU\n"
        f"    model_dir: {model_dir}\n"
        "    model: {MLP: {in_features: 64, out_features: 10}}\n"
        "    optimizer: {SGD: {lr: 0.1}}\n"
        "    loop: {max_steps: 1}\n    logging: {log_steps: 1}\n"
        "  fit:\n    train_dataloader: {Digits: {batch_size: 64}}\n"
    )
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "plugtrain", "fit", str(run)], stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "step 1/1" in line:
            elapsed = time.perf_counter() - start
            break
    else:
        elapsed = float("nan")
    process.wait()
    return elapsed


def main() -> None:
    """Measure and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, nargs=2, default=[200, 1200])
    parser.add_argument(
        "--callback", action="append", default=[], help="a registered callback (repeatable)"
    )
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--workload", choices=("mlp", "gpt"), default="mlp")
    args = parser.parse_args()
    global clock  # noqa: PLW0603 - one clock for every loop of this run
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    short, long = args.steps
    torch.set_num_threads(1)
    if args.workload == "gpt":
        gpt_main(args.repeats, short, long, args.clock)
        return
    callbacks = [plugtrain.resolve("callback", name)() for name in args.callback]
    loops = {
        "hand-written loop": hand_loop,
        "plugtrain Trainer": trainer_loop,
        "Lightning Trainer": lightning_loop,
        "hand-written loop, bf16 autocast + clip": lambda n, d: hand_loop(n, d, precision=True),
        "plugtrain Trainer, precision bf16 + clip": lambda n, d: trainer_loop(
            n, d, PRECISION, callbacks
        ),
        "hand-written loop, bf16 + clip + norms": lambda n, d: hand_loop(
            n, d, precision=True, norms=True
        ),
        "plugtrain Trainer, bf16 + clip + ComputeNorm": lambda n, d: trainer_loop(
            n, d, PRECISION, [plugtrain.resolve("callback", "ComputeNorm")()]
        ),
    }
    baseline = {
        "plugtrain Trainer": "hand-written loop",
        "Lightning Trainer": "hand-written loop",
        "plugtrain Trainer, precision bf16 + clip": "hand-written loop, bf16 autocast + clip",
        "plugtrain Trainer, bf16 + clip + ComputeNorm": "hand-written loop, bf16 + clip + norms",
    }
    per_step: dict[str, list[float]] = {name: [] for name in loops}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for _ in range(args.repeats):
            for name, loop in loops.items():
                first = loop(short, directory)
                second = loop(long, directory)
                if first is not None and second is not None:
                    per_step[name].append((second - first) / (long - short))
        startup = statistics.median(startup_to_first_step(directory) for _ in range(3))
    print(
        f"# Loop benchmark\n\n{platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, 1 intra-op thread, {args.clock} clock, median of {args.repeats}, "
        f"slope between {short} and {long} steps\n"
    )
    if callbacks:
        print(f"Callbacks of the precision Trainer: {', '.join(args.callback)}\n")
    print("| loop | ms per step | x its hand loop |")
    print("|---|---|---|")
    for name, samples in per_step.items():
        if not samples:
            print(f"| {name} | not installed or does not import | |")
            continue
        median = statistics.median(samples)
        hand = statistics.median(per_step[baseline.get(name, name)])
        print(f"| {name} | {median * 1e3:.3f} | {median / hand:.3f} |")
    print(f"\nCold start of `plugtrain fit` to its first logged step: {startup:.2f} s")


if __name__ == "__main__":
    main()
