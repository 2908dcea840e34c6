"""The commands that take a run file: ``check``, ``fit``, ``validate``, ``validate_all``, ``plot``.

``check`` and ``plot`` import no torch (``check --deep`` does); ``fit`` and its siblings train or
evaluate as the run file says, in as many processes as it asks for.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry import Registry

if TYPE_CHECKING:
    from plugtrain.config.plan import RunPlan, TrainerPlan

__all__ = ["check", "fit", "plot"]


def check(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain check RUN.yaml [--world-size N [--deep]]``: validate without building."""
    from plugtrain.config import load_plan

    plan, run_registry = load_plan(args.run_file, args.set)
    for warning in plan.warnings:
        sys.stderr.write(f"plugtrain: warning: {warning}\n")
    deep = _check_world(args, plan, run_registry)
    from plugtrain.commands.hf_check import hf_checkpoint_issues
    from plugtrain.config import load_run_file

    issues = hf_checkpoint_issues(load_run_file(args.run_file, args.set), plan, run_registry)
    if issues:
        raise ConfigError(issues)
    for trainer in plan.trainers:
        sparsity = ", ".join(group.algorithm for group in trainer.sparsity)
        sparse = f"; sparsity {sparsity}" if sparsity else ""
        out.write(
            f"{trainer.path}: backend {trainer.backend_type}; {', '.join(trainer.steps)}{sparse}\n"
        )
    for line in deep:
        out.write(f"{line}\n")
    count = len(plan.trainers)
    out.write(f"{args.run_file}: OK ({count} trainer{'s' if count != 1 else ''})\n")
    return EXIT_OK


def _check_world(args: argparse.Namespace, plan: RunPlan, registry: Registry) -> list[str]:
    """``--world-size N`` (torch-free) and ``--deep`` (a fake process group): report lines."""
    world_size = getattr(args, "world_size", None)
    if world_size is None:
        if getattr(args, "deep", False):
            raise ConfigError([ConfigIssue("--deep", "needs --world-size N")])
        return []
    from plugtrain.config import load_run_file
    from plugtrain.config.world_check import world_size_issues

    data = load_run_file(args.run_file, args.set)
    issues = world_size_issues(data, registry, world_size)
    if issues:
        raise ConfigError(issues)
    if not args.deep:
        return []
    from plugtrain.train.assembly import deep_check

    return deep_check(plan, registry, data, world_size)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("plugtrain: %(message)s"))
    logger = logging.getLogger("plugtrain")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def fit(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain fit|validate|validate_all RUN.yaml``: train or evaluate (``args.command``)."""
    from plugtrain import launching
    from plugtrain.config import load_plan
    from plugtrain.train.assembly import launch_if_needed, requeue_on_signal, run_plan
    from plugtrain.train.distributed import collective_errors

    _configure_logging()
    # Validated once, used throughout; fit and validate import the run file's local plugins.
    plan, run_registry = load_plan(args.run_file, args.set, import_local=True)
    levels = [t.logging.log_level for t in plan.trainers if t.logging is not None]
    if levels:  # Model Zoo's logging.log_level (the first trainer's that sets one)
        logging.getLogger("plugtrain").setLevel(levels[0])
    # Several processes asked for: torchrun starts them, each runs this same command line.
    status = launch_if_needed(plan, run_registry, args.argv)
    if status is not None:
        return status
    with launching.exit_worker_when_done():
        with requeue_on_signal(plan), collective_errors():
            results = run_plan(
                plan, run_registry, mode=args.command, after_fit=_schedule_plot_drawer(run_registry)
            )
        for index, metrics in enumerate(results):
            if isinstance(metrics, list) and launching.is_main_rank():  # validate_all's records
                for record in metrics:
                    out.write(f"trainer {index}: {_describe_record(record)}\n")
            elif metrics and launching.is_main_rank():
                shown = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
                out.write(f"trainer {index}: validation {shown}\n")
    return EXIT_OK


def _schedule_plot_drawer(registry: Registry) -> Callable[[TrainerPlan, Any], None]:
    """What ``fit`` does after each trainer's fit: draw its schedules into ``schedule.png``."""

    def draw(plan: TrainerPlan, trainer: Any) -> None:
        if not trainer.is_main_process:
            return
        from plugtrain.authoring.schedule_plot import MATPLOTLIB_MISSING, plot_trainer_schedules
        from plugtrain.errors import MissingDependencyError

        log = logging.getLogger("plugtrain")
        target = Path(trainer.model_dir) / "schedule.png"
        try:
            written = plot_trainer_schedules(plan, target, trainer.global_step or None, registry)
        except MissingDependencyError as exc:  # matplotlib is optional: say why, go on
            if str(exc) != MATPLOTLIB_MISSING:
                raise
            log.warning("schedule.png not written: %s", MATPLOTLIB_MISSING)
            return
        if written is not None:
            log.info("schedule plot written to %s", written)

    return draw


def _describe_record(record: Mapping[str, Any]) -> str:
    """One validate_all record: which checkpoint and data, then the metrics."""
    checkpoint = record.get("checkpoint") or "the model as it is"
    shown = ", ".join(
        f"{name} {value:.4f}"
        for name, value in record.items()
        if name not in ("checkpoint", "step", "dataloader")
    )
    return (
        f"validation of {checkpoint} (step {record.get('step')}) on {record.get('dataloader')}: "
        f"{shown}"
    )


def plot(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain plot RUN.yaml [-o FILE] [--steps N]``: each trainer's schedules, drawn."""
    from plugtrain.authoring.schedule_plot import plot_trainer_schedules
    from plugtrain.config import load_plan

    plan, run_registry = load_plan(args.run_file, args.set)
    target = Path(args.output)
    drawn = 0
    for index, trainer in enumerate(plan.trainers):
        path = target if len(plan.trainers) == 1 else target.with_stem(f"{target.stem}-{index}")
        loop = trainer.loop
        steps = args.steps or (loop and (loop.max_steps or loop.num_steps)) or None
        if plot_trainer_schedules(trainer, path, steps, run_registry) is None:
            continue
        out.write(f"{trainer.path}: schedules drawn in {path}\n")
        drawn += 1
    if not drawn:
        out.write(f"{args.run_file}: no schedulers to draw\n")
    return EXIT_OK
