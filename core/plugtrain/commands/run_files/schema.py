"""``plugtrain schema``: the JSON Schema of run files with every installed component."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands.output import write
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain schema``."""
    parser = commands.add_parser(
        name, help="JSON Schema of run files with every installed component (for editors)"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain schema [-o FILE]``: the JSON Schema of run files (for editors)."""
    from plugtrain.authoring.jsonschema import dumps, run_file_schema

    return write(dumps(run_file_schema(registry)), args.output, out)
