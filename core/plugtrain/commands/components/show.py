"""``plugtrain show``: one component described, with every argument (never imports torch)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.discovery.loading import plugin_output_to_stderr
from plugtrain.errors import UnknownNameError
from plugtrain.registry._suggest import did_you_mean
from plugtrain.registry.components import ComponentInfo, Registry
from plugtrain.registry.kinds import KINDS

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain show``."""
    parser = commands.add_parser(name, help="describe one component")
    parser.add_argument("name", help="component name, e.g. SGD")
    parser.add_argument("--kind", choices=list(KINDS), help="only look in this kind")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
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
    from plugtrain.registry.shipped import shipped_by

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
    from plugtrain.config.validation.checker import NAME_KEYS

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
