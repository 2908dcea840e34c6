"""``plugtrain checkpoint ACTION``: checkpoints into another layout or format.

``relayout`` turns a single-file checkpoint into a DCP folder or back (``convert SOURCE TARGET``
is its older spelling); ``export`` writes the model's weights; ``convert`` with ``--src-fmt``/
``--tgt-fmt``, ``convert-config`` and ``list-converters`` are
:mod:`plugtrain.commands.checkpoints.conversion`'s (between Hugging Face and plugtrain).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.components import Registry

if TYPE_CHECKING:
    from plugtrain.commands.plugin import Subcommands

__all__ = ["add_parser", "convert_checkpoint", "run"]


def add_parser(commands: Subcommands, name: str) -> argparse.ArgumentParser:
    """The parser of ``plugtrain checkpoint`` and of each of its actions."""
    parser = commands.add_parser(
        name, help="convert checkpoints (Hugging Face <-> plugtrain, file <-> DCP)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_convert(actions)
    relayout = actions.add_parser(
        "relayout", help="a single-file checkpoint into a DCP folder or back (bit for bit)"
    )
    relayout.add_argument("source", help="a checkpoint file or DCP folder")
    relayout.add_argument("target", help="the new DCP folder or file (must not exist)")
    export = actions.add_parser(
        "export", help="the model weights as a plain state_dict file or safetensors"
    )
    export.add_argument("source", help="a checkpoint file or DCP folder")
    export.add_argument("target", help="the new file (must not exist)")
    export.add_argument(
        "--format",
        choices=("torch", "safetensors"),
        default=None,
        help="default: safetensors for a .safetensors target, else torch",
    )
    config = actions.add_parser(
        "convert-config", help="a Hugging Face config.json to a model YAML, or back"
    )
    config.add_argument("config", help="config.json, or a run file / model YAML")
    config.add_argument("--model", help="converter key (default: from config.json / the YAML)")
    config.add_argument("--src-fmt", required=True, help="hf or plugtrain")
    config.add_argument("--tgt-fmt", required=True, help="hf or plugtrain")
    config.add_argument("--output-dir", help="default: the config's folder")
    config.add_argument("--debug", action="store_true", help="accepted")
    listing = actions.add_parser("list-converters", help="the installed checkpoint converters")
    listing.add_argument("model", nargs="?", help="only this converter")
    listing.add_argument("--hide-notes", action="store_true", help="one line per converter")
    return parser


def _add_convert(actions: Subcommands) -> None:
    convert = actions.add_parser(
        "convert",
        help="--src-fmt hf|plugtrain --tgt-fmt ...: between Hugging Face and plugtrain; "
        "SOURCE TARGET alone: a single-file checkpoint into a DCP folder or back",
    )
    convert.add_argument(
        "source", help="a checkpoint file, DCP folder, or Hugging Face folder/file"
    )
    convert.add_argument("target", nargs="?", help="(file <-> DCP) the new file or folder")
    convert.add_argument("--model", help="converter key (plugtrain checkpoint list-converters)")
    convert.add_argument("--src-fmt", help="hf or plugtrain")
    convert.add_argument("--tgt-fmt", help="hf, plugtrain or hf-peft (adapters)")
    convert.add_argument(
        "--config", help="config.json (from hf) or a run/model YAML (from plugtrain)"
    )
    convert.add_argument("--output-dir", help="default: the source's folder")
    convert.add_argument("--hf-shard-size", default="10GB", help="largest shard (default 10GB)")
    convert.add_argument(
        "--export-safetensors", action="store_true", help="safetensors shards (the default)"
    )
    convert.add_argument("--export-bin", action="store_true", help="pytorch_model-*.bin shards")
    convert.add_argument(
        "--drop-unmatched-keys", action="store_true", help="leave out tensors no rule matches"
    )
    convert.add_argument(
        "--tokenizer", help="a tokenizer folder to copy into a Hugging Face export"
    )
    convert.add_argument(
        "--no-progress-bar", action="store_true", help="accepted (no bar is drawn)"
    )
    convert.add_argument("--debug", action="store_true", help="log every tensor as it converts")


def run(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """Run the ACTION of ``plugtrain checkpoint``."""
    if args.action == "convert-config":
        from plugtrain.commands.checkpoints.conversion import convert_config

        return convert_config(args, registry, out)
    if args.action == "list-converters":
        from plugtrain.commands.checkpoints.conversion import list_converters

        return list_converters(args, registry, out)
    return convert_checkpoint(args, registry, out)


def convert_checkpoint(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``relayout`` (a file to a DCP folder or back; also ``convert``) or ``export``."""
    from plugtrain.train.checkpointing import export_weights, relayout_checkpoint

    if args.action == "convert" and (args.src_fmt or args.tgt_fmt):
        from plugtrain.commands.checkpoints.conversion import convert_formats

        return convert_formats(args, registry, out)
    if args.action == "convert" and args.target is None:
        raise ConfigError(
            [
                ConfigIssue(
                    "checkpoint convert",
                    "give a TARGET (file <-> DCP), or --src-fmt and --tgt-fmt (hf <-> plugtrain)",
                )
            ]
        )
    if args.action in ("convert", "relayout"):
        written = relayout_checkpoint(args.source, args.target)
    else:
        written = export_weights(args.source, args.target, args.format)
    out.write(f"{args.source} -> {written}\n")
    return EXIT_OK
