"""``plugtrain fit``, ``validate`` and ``validate_all``: train or evaluate as a run file says.

The three share a parser and a body (``args.command`` says which); they run in as many
processes as the run file asks for.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.commands.arguments import add_run_file_arguments
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands
    from plugtrain.config.plan import TrainerPlan

__all__ = ["HELP", "add_parser", "run"]

HELP = {
    "fit": "train (and evaluate) as a run file says",
    "validate": "evaluate as a run file says",
    "validate_all": "evaluate every checkpoint on every data set of validate_all",
}
"""The commands this module gives and their help."""

FIT_EPILOG = (
    "Fine-tuning a Hugging Face folder (full or LoRA, resuming, exporting back): "
    "docs/fine-tuning.md. Run files to start from: examples/ (finetune_llama_full.yaml, "
    "finetune_llama_lora.yaml, quickstart.yaml)."
)
"""What ``plugtrain fit --help`` ends with: where the guide and the example run files are."""


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain fit``, ``validate`` or ``validate_all`` (``name``)."""
    epilog = FIT_EPILOG if name == "fit" else None
    parser = commands.add_parser(name, help=HELP[name], epilog=epilog)
    add_run_file_arguments(parser)
    return parser


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("plugtrain: %(message)s"))
    logger = logging.getLogger("plugtrain")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain fit|validate|validate_all RUN.yaml``: train or evaluate (``args.command``)."""
    from plugtrain import launching
    from plugtrain.config import load_plan
    from plugtrain.launching.elastic import collective_errors
    from plugtrain.launching.run_file import launch_if_needed, requeue_on_signal
    from plugtrain.train.assembly import run_plan

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
