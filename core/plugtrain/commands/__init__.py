"""What each ``plugtrain`` command does, one module per job; :mod:`plugtrain.cli` parses and calls.

Every command is a function ``(args, registry, out) -> exit status`` (:data:`Command`): ``args``
as the parser left them, ``registry`` built with the ``-p`` options, ``out`` the real stdout.
Commands of plugin distributions come through the entry-point group ``plugtrain.commands``
(:mod:`plugtrain.commands.plugin`). Nothing here imports torch at import time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from plugtrain.registry import Registry

__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "EXIT_OK", "Command"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2

Command = Callable[[argparse.Namespace, Registry, TextIO], int]
"""A command's body: parsed arguments, the registry and stdout in, the exit status out."""
