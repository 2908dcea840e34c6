"""``plugtrain generate``, a command added through the entry-point group ``plugtrain.commands``.

Torch-free to import (every ``plugtrain`` command line builds this parser); the model is built
and run by :mod:`plugtrain_models.generation.run` when the command runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "add_run_options", "bounded", "run"]


def bounded(
    kind: type[int] | type[float], *, gt: float | None = None, ge: float | None = None,
    le: float | None = None,
) -> Callable[[str], int | float]:  # fmt: skip
    """An argparse ``type`` reading ``kind`` within the bounds the run-file key of a flag has.

    A value outside them is an argparse error (exit 2) saying the bound and the value given.
    """

    def read(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind.__name__}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        for bound, holds, words in ((gt, lambda b: value > b, ">"),
                                    (ge, lambda b: value >= b, ">="),
                                    (le, lambda b: value <= b, "<=")):  # fmt: skip
            if bound is not None and not holds(bound):
                raise argparse.ArgumentTypeError(f"must be {words} {bound:g}, got {text}")
        return value

    read.__name__ = kind.__name__  # argparse names the type in its messages
    return read


HELP = "write text with the run file's model (KV cache, Model Zoo's sampling; plugtrain-models)"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run file, ``--ckpt``, ``--tokenizer`` and ``--set`` (shared with ``lm_eval``)."""
    parser.add_argument("run_file", metavar="RUN.yaml", help="the run file (its first trainer)")
    parser.add_argument(
        "--ckpt", metavar="PATH",
        help="a checkpoint or a Hugging Face folder (default: the newest in model_dir)",
    )  # fmt: skip
    parser.add_argument(
        "--tokenizer", metavar="DIR",
        help="a tokenizer folder or tokenizer.json (default: --ckpt's folder when it holds one)",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY.PATH=VALUE",
        help="override a value of the run file (YAML; repeatable)",
    )  # fmt: skip


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain generate``."""
    parser = commands.add_parser(name, help=HELP, description=HELP)
    add_run_options(parser)
    prompts = parser.add_mutually_exclusive_group(required=True)
    prompts.add_argument(
        "--prompt", action="extend", nargs="+", metavar="TEXT", help="one or more prompts"
    )
    prompts.add_argument(
        "--prompts-file", metavar="FILE",
        help='one prompt a line; a .jsonl file: {"prompt": TEXT} or {"messages": [...]} a line',
    )  # fmt: skip
    parser.add_argument(
        "--chat", action="store_true",
        help="render each prompt as a user turn with the tokenizer's chat template",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens", type=bounded(int, gt=0), metavar="N", help="default: model.max_tokens"
    )
    parser.add_argument(
        "--temperature", type=bounded(float, gt=0), metavar="T", help="sample (Model Zoo rules)"
    )
    parser.add_argument(
        "--top-k", type=bounded(int, gt=0), metavar="K", help="sample among the K likeliest"
    )
    parser.add_argument(
        "--top-p", type=bounded(float, ge=0, le=1), metavar="P", help="sample from this much mass"
    )
    parser.add_argument("--seed", type=int, metavar="S", help="makes sampling reproducible")
    parser.add_argument(
        "--json", action="store_true",
        help="one JSON object per prompt: prompt, token_ids (generated ids), text",
    )  # fmt: skip
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Generate for each prompt and print the texts (or JSON lines)."""
    from plugtrain_models.generation.run import generate_command

    return generate_command(args, out)
