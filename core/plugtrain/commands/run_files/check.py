"""``plugtrain check``: validate a run file without building anything.

It imports no torch, except with ``--world-size N --deep`` (a fake process group of N).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.commands.arguments import add_run_file_arguments
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands
    from plugtrain.config.plan import RunPlan

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain check``."""
    parser = commands.add_parser(
        name, help="validate a run file without building anything (no torch import)"
    )
    add_run_file_arguments(parser)
    parser.add_argument(
        "--world-size",
        type=int,
        metavar="N",
        help="check the parallel plan (dp_shard x dp_replicate) at N processes",
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="with --world-size: shard the model on a fake process group of N and "
        "report per-rank bytes (imports torch)",
    )
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain check RUN.yaml [--world-size N [--deep]]``: validate without building."""
    from plugtrain.config import load_plan

    plan, run_registry = load_plan(args.run_file, args.set)
    for warning in plan.warnings:
        sys.stderr.write(f"plugtrain: warning: {warning}\n")
    deep = _check_world(args, plan, run_registry)
    from plugtrain.commands.run_files.hf_check import hf_checkpoint_issues
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
    from plugtrain.config.validation.world_check import world_size_issues

    data = load_run_file(args.run_file, args.set)
    issues = world_size_issues(data, registry, world_size)
    if issues:
        raise ConfigError(issues)
    if not args.deep:
        return []
    from plugtrain.train.assembly import deep_check

    return deep_check(plan, registry, data, world_size)
