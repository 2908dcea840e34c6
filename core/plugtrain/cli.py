"""The ``plugtrain`` command (also ``python -m plugtrain``): dispatch, report errors.

Each built-in command is a module of :mod:`plugtrain.commands` that adds its own parser and
runs it (:data:`BUILTIN_COMMANDS`); commands of plugin distributions come the same way through
the entry-point group ``plugtrain.commands`` (:mod:`plugtrain.commands.plugin`).

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

from plugtrain.commands import EXIT_CONFIG, EXIT_ERROR, BuiltinCommand, Command
from plugtrain.commands.checkpoints import checkpoint
from plugtrain.commands.components import installed, listing, new, show
from plugtrain.commands.plugin import Subcommands, add_plugin_commands
from plugtrain.commands.run_files import check, fit, plot, schema
from plugtrain.discovery import loading as plugins
from plugtrain.discovery.attribution import attribute_error
from plugtrain.errors import ConfigError, PlugtrainError, UnknownNameError
from plugtrain.registry.components import Registry

__all__ = ["BUILTIN_COMMANDS", "main"]

BUILTIN_COMMANDS: dict[str, BuiltinCommand] = {
    "list": listing,
    "show": show,
    "check": check,
    "fit": fit,
    "validate": fit,
    "validate_all": fit,
    "plot": plot,
    "checkpoint": checkpoint,
    "plugins": installed,
    "schema": schema,
    "new": new,
}
"""Each built-in command and the module of :mod:`plugtrain.commands` that parses and runs it."""


def _registry(args: argparse.Namespace) -> Registry:
    settings = plugins.PluginSettings.from_env(args.plugin)
    plugins.reset(settings)
    return plugins.get_registry()


def _add_builtin_commands(commands: Subcommands) -> None:
    for name, command in BUILTIN_COMMANDS.items():
        parser = command.add_parser(commands, name)
        parser.set_defaults(handler=command.run)


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
    _add_builtin_commands(commands)
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


def _usage_errors() -> tuple[type[Exception], ...]:
    """The errors that exit 2 (a checkpoint's ``config.json`` against the model among them).

    Called only once an exception reaches :func:`main`, so that checkpoint opening and the
    configuration readers it imports stay out of every command's start-up.
    """
    from plugtrain.conversion.opening import ConfigMismatchError

    return (ConfigError, UnknownNameError, ConfigMismatchError)


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
    except _usage_errors() as exc:  # usage errors (a
        # checkpoint's config.json against the run file's model too, as check says it): 2
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
