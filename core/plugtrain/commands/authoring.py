"""``plugtrain schema`` and ``plugtrain new``: what helps write run files and plugins."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.commands.output import write
from plugtrain.errors import ConfigError
from plugtrain.registry import Registry

__all__ = ["new_plugin", "write_schema"]


def write_schema(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain schema [-o FILE]``: the JSON Schema of run files."""
    from plugtrain.authoring.jsonschema import dumps, run_file_schema

    return write(dumps(run_file_schema(registry)), args.output, out)


def new_plugin(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
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
