"""``plugtrain plot``: draw the schedules of a run file (no torch import)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.commands.arguments import add_run_file_arguments
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain plot``."""
    parser = commands.add_parser(name, help="draw the schedules of a run file")
    add_run_file_arguments(parser)
    parser.add_argument("-o", "--output", default="schedule.png", help="image file")
    parser.add_argument("--steps", type=int, default=None, help="steps to draw")
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
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
