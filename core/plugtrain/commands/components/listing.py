"""``plugtrain list``: the registered components (never imports torch), cached while valid."""

from __future__ import annotations

import argparse
import io
import json
from typing import TYPE_CHECKING, Any, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.commands.components import listing_cache
from plugtrain.commands.output import print_table, write
from plugtrain.discovery.loading import plugin_output_to_stderr
from plugtrain.registry.components import Component, Registry
from plugtrain.registry.kinds import KINDS

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run", "run_cached"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain list``."""
    parser = commands.add_parser(name, help="list registered components")
    parser.add_argument("kind", nargs="?", choices=list(KINDS), help="only this kind")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--markdown", action="store_true", help="print a Markdown reference with every argument"
    )
    parser.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    parser.set_defaults(cached=run_cached)
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain list [KIND] [--json | --markdown] [-o FILE]``."""
    if args.markdown:
        from plugtrain.authoring.reference import components_markdown

        with plugin_output_to_stderr():  # the schemas are plugin code, imported here
            text = components_markdown(registry, args.kind)
        return write(text, args.output, out)
    with plugin_output_to_stderr():
        rows = [_list_row(c) for c in registry.components()]
    if _cacheable(args) and not any(p.status == "failed" for p in registry.plugins()):
        listing_cache.store_rows(rows)
    return _write_rows(args, rows, out)


def run_cached(args: argparse.Namespace, out: TextIO) -> int | None:
    """``plugtrain list`` from the rows of an earlier call, if still valid; else ``None``.

    (:mod:`plugtrain.commands.components.listing_cache` says when they are.)
    """
    if not _cacheable(args):
        return None
    rows = listing_cache.load_rows()
    if rows is None:
        return None
    return _write_rows(args, rows, out)


def _cacheable(args: argparse.Namespace) -> bool:
    """Whether the listing may use the cache: the command line's, without ``-p``.

    Not with ``-p`` (it changes what is loaded), nor for a program calling
    :func:`plugtrain.cli.main` (which may have patched anything).
    """
    plain = not args.markdown and not getattr(args, "plugin", None)
    return plain and bool(getattr(args, "from_command_line", False))


def _write_rows(args: argparse.Namespace, rows: list[dict[str, Any]], out: TextIO) -> int:
    rows = [r for r in rows if args.kind is None or r["kind"] == args.kind]
    if args.output is not None:
        buffer = io.StringIO()
        _list(args, rows, buffer)
        return write(buffer.getvalue(), args.output, out)
    return _list(args, rows, out)


def _list(args: argparse.Namespace, rows: list[dict[str, Any]], out: TextIO) -> int:
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    table = [
        (r["name"], r["kind"], r["provider"] or "", r["version"] or "", r["summary"]) for r in rows
    ]
    print_table(("NAME", "KIND", "PROVIDER", "VERSION", "SUMMARY"), table, out)
    if not rows:
        wanted = KINDS[args.kind].distribution if args.kind else "plugtrain-optimizers"
        out.write(f"no components found; install a plugin, e.g. pip install {wanted}\n")
    return EXIT_OK


def _list_row(component: Component) -> dict[str, Any]:
    return {
        "name": component.name,
        "kind": component.kind,
        "aliases": list(component.aliases),
        "provider": component.plugin.distribution or f"{component.plugin.module} (local)",
        "version": component.plugin.version,
        "plugin": component.plugin.name,
        "summary": _summary(component),
    }


def _summary(component: Component) -> str:
    if component.summary:
        return component.summary
    doc = component.schema_class.__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""
