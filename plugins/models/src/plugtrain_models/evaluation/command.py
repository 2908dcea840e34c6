"""``plugtrain lm_eval``, a command added through the entry-point group ``plugtrain.commands``.

Model Zoo's ``cszoo lm_eval`` on plugtrain's own model: the run file's ``EleutherEvalHarness``
callback runs once on the weights ``--ckpt`` names; its flags override ``eeh_args``. Torch-free
to import; :mod:`plugtrain_models.evaluation.run` does the work.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from plugtrain_models.generation.command import add_run_options, bounded

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]

HELP = "run lm-eval tasks on the run file's model (EleutherEvalHarness; plugtrain-models[eval])"


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain lm_eval`` (Model Zoo's flag spellings accepted too)."""
    parser = commands.add_parser(name, help=HELP, description=HELP)
    add_run_options(parser)
    parser.add_argument(
        "--tasks", metavar="TASKS",
        help="task names, YAML files or folders, comma-separated (overrides eeh_args.tasks)",
    )  # fmt: skip
    parser.add_argument("--num-fewshot", "--num_fewshot", type=bounded(int, ge=0), metavar="N")
    parser.add_argument("--limit", type=bounded(float, gt=0), metavar="N", help="examples per task")
    parser.add_argument("--output-path", "--output_path", metavar="DIR", help="results JSON here")
    parser.add_argument("--include-path", "--include_path", metavar="DIR", help="more task YAMLs")
    parser.add_argument("--batch-size", "--batch_size", type=bounded(int, gt=0), metavar="N")
    parser.add_argument("--max-tokens", "--max_tokens", type=bounded(int, gt=0), metavar="N")
    parser.add_argument("--temperature", type=bounded(float, gt=0), metavar="T")
    parser.add_argument("--top-k", "--top_k", type=bounded(int, gt=0), metavar="K")
    parser.add_argument("--top-p", "--top_p", type=bounded(float, ge=0, le=1), metavar="P")
    parser.add_argument(
        "--keep-data-dir", "--keep_data_dir", action="store_true",
        help="Cerebras systems only: accepted, no effect",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the harness and print each ``<task>/<metric>``."""
    from plugtrain_models.evaluation.run import lm_eval_command

    return lm_eval_command(args, out)
