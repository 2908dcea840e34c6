"""``plugtrain plugins``: the installed plugins, their status, hooks and components."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.discovery import loading as plugins
from plugtrain.registry.components import Registry
from plugtrain.registry.kinds import KINDS

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain plugins``."""
    parser = commands.add_parser(name, help="installed plugins, their status and components")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain plugins [--json]``."""
    rows = plugins.plugin_summary(registry)
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    from plugtrain._version import PLUGIN_API_VERSION, __version__

    out.write(f"plugtrain {__version__} provides plugin API {PLUGIN_API_VERSION}\n")
    for row in rows:
        provider = f"{row['distribution']} {row['version']}" if row["distribution"] else "local"
        out.write(f"{row['name']}: {provider} [{row['status']}] ({row['module']})\n")
        if row["api"] is not None:
            declared = ", ".join(row["api"]) or "not declared"
            out.write(f"    plugin API: {declared}\n")
        if row["error"]:
            out.write(f"    error: {row['error']}\n")
        if row["hooks"]:
            out.write(f"    hooks: {', '.join(row['hooks'])}\n")
        for kind, names in row["components"].items():
            plural = KINDS[kind].plural if kind in KINDS else f"{kind}s"
            out.write(f"    {plural}: {', '.join(names)}\n")
    if not rows:
        out.write("no plugins found\n")
    return EXIT_OK
