"""``plugtrain new``: write a new plugin distribution that passes its own tests once installed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.errors import ConfigError
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain new``."""
    parser = commands.add_parser(name, help="write a new plugin distribution (KIND NAME pairs)")
    parser.add_argument(
        "components",
        nargs="+",
        metavar="KIND NAME",
        help="e.g. optimizer Prodigy scheduler WarmupLR (kinds: optimizer, scheduler, "
        "callback, logger, backend, model, dataloader, sparsity; a scheduler whose name ends "
        "in WD schedules the weight decay)",
    )
    parser.add_argument("--package", help="distribution name (default plugtrain-NAME)")
    parser.add_argument("--dir", help="folder to write (default: the package name)")
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain new KIND NAME ...``: write a new plugin distribution."""
    from plugtrain.authoring.scaffold import (
        ScaffoldError,
        default_package,
        parse_specs,
        write_package,
    )

    try:
        specs = parse_specs(args.components)
        package = args.package or default_package(specs)
        folder = Path(args.dir or package)
        written = write_package(specs, folder, package)
    except ScaffoldError as exc:
        raise ConfigError(f"plugtrain new: {exc}") from exc
    out.write(f"wrote {len(written)} files of {package} in {folder}\n")
    out.write(f'next: cd {folder} && python -m pip install -e ".[test]" && python -m pytest\n')
    return EXIT_OK
