"""The ``plugtrain`` command (also ``python -m plugtrain``): parse, dispatch, report errors.

What each command does is in :mod:`plugtrain.commands`, one module per job; commands of plugin
distributions come through the entry-point group ``plugtrain.commands``
(:mod:`plugtrain.commands.plugin`).

Listing commands (``list``, ``show``, ``plugins``) never import torch or any implementation.
Errors are printed without a traceback (``--traceback``, anywhere on the command line, shows it).

Exit statuses: 0 success; 2 a usage error: a bad command line, a bad run file or argument, an
unknown name (of a component or a kind, in every command); 1 any other error (training, a
backend, a plugin's own code); 130, 143 or 129 when stopped by SIGINT, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from plugtrain import plugins
from plugtrain.attribution import attribute_error
from plugtrain.commands import EXIT_CONFIG, EXIT_ERROR, Command
from plugtrain.commands.authoring import new_plugin, write_schema
from plugtrain.commands.checkpoint import convert_checkpoint
from plugtrain.commands.components import list_components, list_from_cache, show_component
from plugtrain.commands.conversion import convert_config, list_converters
from plugtrain.commands.installed import list_plugins
from plugtrain.commands.plugin import Subcommands, add_plugin_commands
from plugtrain.commands.run_file import check, fit, plot
from plugtrain.errors import ConfigError, PlugtrainError, UnknownNameError
from plugtrain.kinds import KINDS
from plugtrain.registry import Registry

__all__ = ["main"]


def _registry(args: argparse.Namespace) -> Registry:
    settings = plugins.PluginSettings.from_env(args.plugin)
    plugins.reset(settings)
    return plugins.get_registry()


# -- parser ----------------------------------------------------------------------------------


def _add_listing_commands(commands: Subcommands) -> None:
    listing = commands.add_parser("list", help="list registered components")
    listing.add_argument("kind", nargs="?", choices=list(KINDS), help="only this kind")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument(
        "--markdown", action="store_true", help="print a Markdown reference with every argument"
    )
    listing.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    listing.set_defaults(handler=list_components, cached=list_from_cache)

    show = commands.add_parser("show", help="describe one component")
    show.add_argument("name", help="component name, e.g. SGD")
    show.add_argument("--kind", choices=list(KINDS), help="only look in this kind")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=show_component)


RUN_FILE_COMMANDS: dict[str, tuple[str, Command]] = {
    "check": ("validate a run file without building anything (no torch import)", check),
    "fit": ("train (and evaluate) as a run file says", fit),
    "validate": ("evaluate as a run file says", fit),
    "validate_all": ("evaluate every checkpoint on every data set of validate_all", fit),
    "plot": ("draw the schedules of a run file", plot),
}
"""The commands that take a run file: help text and what runs them."""


def _add_run_file_commands(commands: Subcommands) -> None:
    for name, (text, handler) in RUN_FILE_COMMANDS.items():
        command = commands.add_parser(name, help=text)
        command.add_argument("run_file", metavar="RUN.yaml", help="the run file")
        command.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override a value (YAML); trainer.* applies to every trainer (repeatable)",
        )
        command.set_defaults(handler=handler)
        if name == "check":
            _add_world_options(command)
        if name == "plot":
            command.add_argument("-o", "--output", default="schedule.png", help="image file")
            command.add_argument("--steps", type=int, default=None, help="steps to draw")


def _add_checkpoint_command(commands: Subcommands) -> None:
    checkpoint = commands.add_parser(
        "checkpoint", help="convert checkpoints (Hugging Face <-> plugtrain, file <-> DCP)"
    )
    actions = checkpoint.add_subparsers(dest="action", metavar="ACTION", required=True)
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
    convert.set_defaults(handler=convert_checkpoint)
    export = actions.add_parser(
        "export", help="the model weights as a plain state_dict file or safetensors"
    )
    export.add_argument("source", help="a checkpoint file or DCP folder")
    export.add_argument("target", help="the new file (must not exist)")
    export.set_defaults(handler=convert_checkpoint)
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
    config.set_defaults(handler=convert_config)
    listing = actions.add_parser("list-converters", help="the installed checkpoint converters")
    listing.add_argument("model", nargs="?", help="only this converter")
    listing.add_argument("--hide-notes", action="store_true", help="one line per converter")
    listing.set_defaults(handler=list_converters)


def _add_world_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--world-size",
        type=int,
        metavar="N",
        help="check the parallel plan (dp_shard x dp_replicate) at N processes",
    )
    command.add_argument(
        "--deep",
        action="store_true",
        help="with --world-size: shard the model on a fake process group of N and "
        "report per-rank bytes (imports torch)",
    )


def _add_authoring_commands(commands: Subcommands) -> None:
    schema = commands.add_parser(
        "schema", help="JSON Schema of run files with every installed component (for editors)"
    )
    schema.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    schema.set_defaults(handler=write_schema)

    new = commands.add_parser("new", help="write a new plugin distribution (KIND NAME pairs)")
    new.add_argument(
        "components",
        nargs="+",
        metavar="KIND NAME",
        help="e.g. optimizer Prodigy scheduler WarmupLR (kinds: optimizer, scheduler, "
        "callback, logger, backend, model, dataloader, sparsity; a scheduler whose name ends "
        "in WD schedules the weight decay)",
    )
    new.add_argument("--package", help="distribution name (default plugtrain-NAME)")
    new.add_argument("--dir", help="folder to write (default: the package name)")
    new.set_defaults(handler=new_plugin)


def _add_options_after_the_command(commands: Subcommands) -> None:
    """``--traceback`` and ``-p`` after the command too, except where every word is the command's.

    A command whose parser takes no ``-`` options (a plugin's) gets every word as it is;
    :func:`_take_traceback` takes ``--traceback`` out of them.
    """
    parsers = {id(parser): parser for parser in commands.choices.values()}  # aliases once
    for subcommand in parsers.values():
        if "-" not in subcommand.prefix_chars:
            continue
        with contextlib.suppress(argparse.ArgumentError):  # a plugin's command has its own
            subcommand.add_argument(
                "--traceback",
                action="store_true",
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
            )
        with contextlib.suppress(argparse.ArgumentError):
            subcommand.add_argument(
                "-p",
                dest="plugin_after",
                action="append",
                default=argparse.SUPPRESS,
                metavar="MODULE",
                help=argparse.SUPPRESS,
            )


def _parser() -> argparse.ArgumentParser:
    from plugtrain._version import __version__

    parser = argparse.ArgumentParser(
        prog="plugtrain",
        description="Train PyTorch models from YAML; every component is a plugin found by name.",
    )
    parser.add_argument("--version", action="version", version=f"plugtrain {__version__}")
    parser.add_argument(
        "-p",
        dest="plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="load MODULE as a plugin; -p no:NAME blocks plugin NAME (repeatable)",
    )
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_listing_commands(commands)
    _add_run_file_commands(commands)
    _add_checkpoint_command(commands)
    listed = commands.add_parser("plugins", help="installed plugins, their status and components")
    listed.add_argument("--json", action="store_true", help="print JSON")
    listed.set_defaults(handler=list_plugins)
    _add_authoring_commands(commands)
    add_plugin_commands(commands)  # after the built-in ones, which a plugin cannot replace
    _add_options_after_the_command(commands)
    return parser


def _take_traceback(args: argparse.Namespace) -> None:
    """A command that gets every word as it is: ``--traceback`` among them is plugtrain's."""
    for dest in getattr(args, "passthrough", ()):
        words = getattr(args, dest)
        if "--traceback" in words:
            words.remove("--traceback")
            args.traceback = True


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.plugin = [*args.plugin, *getattr(args, "plugin_after", [])]
    args.argv = list(sys.argv[1:] if argv is None else argv)
    _take_traceback(args)
    args.from_command_line = argv is None  # may use cached listings
    out = sys.stdout
    try:
        # Machine-read output gets the real stdout; whatever plugin code prints goes to stderr.
        with (
            _logger_restored_afterwards(),
            plugins.restored_afterwards(),
            _stray_prints_to_stderr(args),
        ):
            cached = args.cached(args, out) if "cached" in args else None
            if cached is not None:  # from an earlier call, nothing loaded (plugtrain list)
                out.flush()
                return int(cached)
            registry = _registry(args)
            handler: Command = args.handler
            try:
                status = handler(args, registry, out)
            except Exception as exc:
                # named while the command's plugins (-p) are still registered
                blamed = None if args.traceback else attribute_error(exc)
                if blamed is None:
                    raise
                raise blamed from exc
            out.flush()  # a closed pipe is found here, not at exit
            return status
    except (ConfigError, UnknownNameError) as exc:  # usage errors: the status argparse uses
        return _fail(args, exc, EXIT_CONFIG)
    except PlugtrainError as exc:
        return _fail(args, exc, EXIT_ERROR)
    except KeyboardInterrupt as exc:  # fit's TrainingInterrupted says where it saved the run
        sys.stderr.write(f"plugtrain: {str(exc) or 'interrupted'}\n")
        return int(getattr(exc, "exit_status", 130))  # 128 + the signal: 130, 143, 129
    except BrokenPipeError:
        if args.command not in _OUTPUT_COMMANDS:
            raise
        return _closed_pipe()
    except Exception as exc:
        if args.traceback:
            raise
        blamed = attribute_error(exc)  # a plugin's own code raised: name it, not plugtrain
        if blamed is not None:
            return _fail(args, blamed, EXIT_ERROR)
        sys.stderr.write(
            f"plugtrain: internal error: {type(exc).__name__}: {exc}\n"
            "(run again with --traceback for details)\n"
        )
        return EXIT_ERROR


_OUTPUT_COMMANDS = frozenset({"list", "show", "plugins", "schema", "check"})
"""Commands whose output may go to a pipe that closes early (``plugtrain list | head``)."""


def _closed_pipe() -> int:
    """The reader of stdout went away: stop quietly, as ``SIGPIPE`` would (exit 141).

    stdout is pointed at ``/dev/null`` so that flushing it at exit raises nothing more.
    """
    import os
    import signal

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return 128 + int(signal.SIGPIPE)


@contextlib.contextmanager
def _logger_restored_afterwards() -> Iterator[None]:
    """Give the ``plugtrain`` logger back as it was once a command is done.

    ``fit`` and ``validate`` give it a stderr handler at level INFO that does not propagate; a
    program (or a test) calling :func:`main` keeps its own logging set-up afterwards.
    """
    import logging

    logger = logging.getLogger("plugtrain")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        yield
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def _stray_prints_to_stderr(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    machine_read = getattr(args, "json", False) or args.command == "schema"
    if machine_read:
        return contextlib.redirect_stdout(sys.stderr)
    return contextlib.nullcontext()


def _fail(args: argparse.Namespace, exc: BaseException, status: int) -> int:
    if args.traceback:
        raise exc
    sys.stderr.write(f"plugtrain: error: {exc}\n")
    return status
