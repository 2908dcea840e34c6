"""The ``plugtrain`` commands, one module per command; :mod:`plugtrain.cli` only dispatches.

The commands are in rooms by job: :mod:`.run_files` (``check``, ``fit``, ``validate``,
``validate_all``, ``plot``, ``schema``), :mod:`.components` (``list``, ``show``, ``plugins``,
``new``) and :mod:`.checkpoints` (``checkpoint``); here are what they share (exit statuses, the
run file's arguments, output) and the commands plugin distributions add (:mod:`.plugin`).

Each module owns its command's parser and what the command does, in the shape of the commands
plugin distributions add (:mod:`plugtrain.commands.plugin`): ``add_parser(commands, name)`` adds
the parser of command ``name`` and returns it, ``run(args, registry, out)`` runs it
(:class:`BuiltinCommand`). ``run`` gets ``args`` as the parser left them, ``registry`` built
with the ``-p`` options and ``out``, the real stdout; it returns the exit status. Nothing here
imports torch at import time: every command line builds every parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "EXIT_OK", "BuiltinCommand", "Command"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2

Command = Callable[[argparse.Namespace, Registry, TextIO], int]
"""A command's body: parsed arguments, the registry and stdout in, the exit status out."""


class BuiltinCommand(Protocol):
    """A module of :mod:`plugtrain.commands` that gives one command (or several alike)."""

    def add_parser(self, commands: Subcommands, name: str) -> argparse.ArgumentParser:
        """Add the parser of command ``name`` with ``commands.add_parser(name, ...)``; return it."""

    def run(self, args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
        """Run the command; return its exit status."""
