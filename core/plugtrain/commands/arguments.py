"""Arguments several commands share: the run file and its ``--set`` overrides."""

from __future__ import annotations

import argparse

__all__ = ["add_run_file_arguments"]


def add_run_file_arguments(parser: argparse.ArgumentParser) -> None:
    """``RUN.yaml`` and ``--set KEY.PATH=VALUE`` (repeatable), as every run-file command takes."""
    parser.add_argument("run_file", metavar="RUN.yaml", help="the run file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a value (YAML); trainer.* applies to every trainer (repeatable)",
    )
