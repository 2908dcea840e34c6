"""``plugtrain preprocess``, a command added through the entry-point group ``plugtrain.commands``.

Torch-free and cheap to import (the parser of every ``plugtrain`` command line loads it): the
writer, numpy and h5py are imported only when the command runs. Its options are
:mod:`plugtrain_models.data.preprocess`'s own (``plugtrain preprocess --help`` shows them): every
word after the command goes to it as it is.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]

HELP = "write Model Zoo GPT HDF5 files from text or the stdlib corpus (plugtrain-models)"


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain preprocess``: it takes every word as it is (no ``-`` options)."""
    parser = commands.add_parser(name, help=HELP, add_help=False, prefix_chars="\0")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    return parser


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Hand the words after ``preprocess`` to :func:`plugtrain_models.data.preprocess.main`."""
    from plugtrain_models.data.preprocess import main

    return main(args.arguments, out)
