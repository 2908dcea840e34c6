"""``plugtrain checkpoint convert|export``: checkpoints into another layout or format.

With ``--src-fmt``/``--tgt-fmt``, ``convert`` is :mod:`plugtrain.commands.conversion`'s.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from plugtrain.commands import EXIT_OK
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry import Registry

__all__ = ["convert_checkpoint"]


def convert_checkpoint(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """``convert`` (a file to a DCP folder or back) or ``export`` (the model's weights)."""
    from plugtrain.train.checkpointing import convert as checkpoint_convert

    if args.action == "convert" and (args.src_fmt or args.tgt_fmt):
        from plugtrain.commands.conversion import convert_formats

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
    if args.action == "convert":
        written = checkpoint_convert.convert(args.source, args.target)
    else:
        written = checkpoint_convert.export(args.source, args.target, args.format)
    out.write(f"{args.source} -> {written}\n")
    return EXIT_OK
