"""``plugtrain list`` and ``plugtrain show``: the registered components (never imports torch)."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any, TextIO

from plugtrain._suggest import did_you_mean
from plugtrain.commands import EXIT_OK, listing_cache
from plugtrain.commands.output import print_table, write
from plugtrain.errors import UnknownNameError
from plugtrain.kinds import KINDS
from plugtrain.plugins import plugin_output_to_stderr
from plugtrain.registry import Component, ComponentInfo, Registry

__all__ = ["list_components", "list_from_cache", "show_component"]


def list_components(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
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


def list_from_cache(args: argparse.Namespace, out: TextIO) -> int | None:
    """``plugtrain list`` from the rows of an earlier call, if still valid; else ``None``.

    (:mod:`plugtrain.commands.listing_cache` says when they are.)
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


def show_component(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``plugtrain show NAME [--kind KIND] [--json]``."""
    if args.kind:
        found = [registry.lookup(args.kind, args.name)]
    else:
        found = registry.find(args.name)
        if not found:
            raise UnknownNameError(_not_found_message(registry, args.name))
    with plugin_output_to_stderr():  # describing imports the schemas: plugin code
        infos = [c.describe() for c in found]
    if args.json:
        json.dump([i.to_dict() for i in infos], out, indent=2, default=repr)
        out.write("\n")
        return EXIT_OK
    for number, info in enumerate(infos):
        if number:
            out.write("\n")
        _write_info(info, out)
    return EXIT_OK


def _not_found_message(registry: Registry, name: str) -> str:
    """No kind has ``name``: suggest close names of any kind and the plugins not installed."""
    known = [n for kind in KINDS for n in registry.names(kind)]
    message = f"No component named {name!r}.{did_you_mean(name, known)}"
    from plugtrain.shipped import shipped_by

    empty = [k for k in KINDS.values() if not registry.names(k.name)]
    if empty:
        message += f" No installed plugin provides {', '.join(k.plural for k in empty)}."
    installed = {p.distribution for p in registry.plugins() if p.status == "loaded"}
    for kind in KINDS:  # only what would bring this very name back
        for distribution in shipped_by(kind, name):
            if distribution not in installed:
                article = "an" if kind[0] in "aeiou" else "a"
                message += (
                    f" {name!r} is {article} {kind} of {distribution}, which is not installed "
                    f"(pip install {distribution})."
                )
    return message


def _write_info(info: ComponentInfo, out: TextIO) -> None:
    provider = f"{info.distribution} {info.version}" if info.distribution else "local module"
    out.write(f"{info.name} ({info.kind}) from {provider}, plugin {info.plugin!r}\n")
    if info.aliases:
        out.write(f"aliases: {', '.join(info.aliases)}\n")
    out.write(f"implementation: {info.target}\n")
    from plugtrain.config.checker import NAME_KEYS

    if info.kind == "dataloader":  # the model's spelling is written with its own arguments
        key = NAME_KEYS[info.kind]
        out.write(f"written: {{{info.name}: {{...}}}} or {{{key}: {info.name}, ...}}\n")
    if info.doc:
        out.write("\n" + info.doc + "\n")
    out.write("\narguments:\n")
    if not info.arguments:
        out.write("  (none)\n")
    for argument in info.arguments:
        default = "required" if argument.required else f"default {argument.default!r}"
        line = f"  {argument.name}: {argument.type} ({default})"
        if argument.constraint:
            line += f" [{argument.constraint}]"
        out.write(line + "\n")
        if argument.aliases:
            out.write(f"      aliases: {', '.join(argument.aliases)}\n")
        if argument.help:
            out.write(f"      {argument.help}\n")
