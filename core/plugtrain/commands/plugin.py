r"""Commands that plugin distributions add: entry-point group ``plugtrain.commands``.

A distribution declares each command as an entry point whose name is the command::

    [project.entry-points."plugtrain.commands"]
    preprocess = "plugtrain_models.data.command"

The object named (a module, or ``"package.module:object"``) has two callables
(:class:`PluginCommand`):

- ``add_parser(commands, name)`` calls ``commands.add_parser(name, help=...)`` (``commands`` is
  what ``ArgumentParser.add_subparsers`` returned), adds the command's arguments and returns the
  new parser. It runs whenever the command line is parsed, ``plugtrain --help`` included, so its
  module must be cheap to import and must not import torch: import the implementation in
  ``run``.
- ``run(args, out)`` runs the command: ``args`` is the parsed ``argparse.Namespace``, ``out``
  the stream for its output; it returns the exit status. Raise a :class:`plugtrain.errors`
  error to have it printed without a traceback (``ConfigError``: exit 2, others: 1); any other
  exception is reported as raised by the command and its distribution (``--traceback`` shows it).

A parser built with ``prefix_chars="\0"`` and one ``nargs=argparse.REMAINDER`` argument takes
every word after the command as it is (``plugtrain preprocess`` hands them to its own parser);
plugtrain only takes ``--traceback`` out of them. Other parsers also accept plugtrain's
``--traceback`` and ``-p`` after the command.

Commands are found from installed distributions' metadata, independently of the ``plugtrain``
plugins: ``-p`` and the ``PLUGTRAIN_*`` plugin switches do not apply to them. Nothing
fails at start-up because of one of them: a command whose entry point cannot be loaded (or whose
``add_parser`` raises) is listed as unavailable and running it is an error naming its
distribution and entry point; a name two distributions give is an error naming both when it is
run; a plugin command named like a built-in one is skipped, with a line on stderr naming both.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import sys
from collections.abc import Iterable
from typing import Protocol, TextIO, TypeAlias

import attrs

from plugtrain.errors import (
    ComponentError,
    DuplicateNameError,
    MissingDependencyError,
    PluginContractError,
    PluginLoadError,
    PlugtrainError,
)
from plugtrain.registry.components import Registry

__all__ = [
    "ENTRY_POINT_GROUP",
    "SHIPPED_COMMANDS",
    "PluginCommand",
    "Subcommands",
    "add_plugin_commands",
]

ENTRY_POINT_GROUP = "plugtrain.commands"

SHIPPED_COMMANDS: dict[str, tuple[str, str]] = {
    "preprocess": ("plugtrain-models", "writes Model Zoo's GPT HDF5 files"),
    "generate": ("plugtrain-models", "generates text with a decoder and a KV cache"),
    "lm_eval": ("plugtrain-models", "scores a decoder on lm-eval tasks (its eval extra)"),
}
"""command -> (distribution of plugtrain that adds it, what it does): said when it is absent."""

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``ArgumentParser.add_subparsers`` returns: where a command adds its parser."""


class PluginCommand(Protocol):
    """What a ``plugtrain.commands`` entry point names (a module or any object)."""

    def add_parser(self, commands: Subcommands, name: str) -> argparse.ArgumentParser:
        """Add the parser of command ``name`` with ``commands.add_parser(name, ...)``; return it."""

    def run(self, args: argparse.Namespace, out: TextIO) -> int:
        """Run the command; return its exit status."""


@attrs.frozen
class Provider:
    """One entry point of group ``plugtrain.commands``: the command and who gives it."""

    command: str
    value: str
    distribution: str | None = None
    version: str | None = None

    @property
    def who(self) -> str:
        """``"acme-tools 1.0"``: the distribution and its version."""
        if self.distribution is None:
            return "an unknown distribution"
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def __str__(self) -> str:
        return f"{self.who} (entry point {self.command} = {self.value})"


def _entry_points() -> Iterable[importlib.metadata.EntryPoint]:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _providers() -> dict[str, list[tuple[Provider, importlib.metadata.EntryPoint]]]:
    found: dict[str, list[tuple[Provider, importlib.metadata.EntryPoint]]] = {}
    for ep in _entry_points():
        dist = getattr(ep, "dist", None)
        distribution = dist.metadata["Name"] if dist is not None else None
        version = dist.version if dist is not None else None
        provider = Provider(ep.name, ep.value, distribution, version)
        found.setdefault(ep.name, []).append((provider, ep))
    return {name: sorted(found[name], key=lambda p: str(p[0])) for name in sorted(found)}


def add_plugin_commands(commands: Subcommands) -> None:
    """Add every installed plugin command to ``commands``, which holds the built-in ones.

    Commands of plugtrain's own distributions that are not installed are added hidden: running
    one says what to install.
    """
    builtin = set(commands.choices)
    for name, found in _providers().items():
        if name in builtin:
            for provider, _ in found:
                sys.stderr.write(
                    f"plugtrain: command {name!r} of {provider} clashes with plugtrain's built-in "
                    f"command {name!r} and was skipped\n"
                )
            continue
        if len(found) > 1:
            both = " and ".join(str(provider) for provider, _ in found)
            clash = DuplicateNameError(
                f"command {name!r} is provided by {len(found)} distributions: {both}; "
                "uninstall all but one of them"
            )
            names = " and ".join(provider.who for provider, _ in found)
            _add_unavailable(commands, name, clash, f"(unavailable: given by both {names})")
            continue
        provider, ep = found[0]
        _add_loaded(commands, provider, ep)
    for name, (distribution, what) in SHIPPED_COMMANDS.items():
        if name not in commands.choices:
            missing = MissingDependencyError(
                f"plugtrain {name} {what} and comes with {distribution}, which is not "
                f"installed: pip install {distribution}"
            )
            _add_unavailable(commands, name, missing, None)


def _add_loaded(
    commands: Subcommands, provider: Provider, ep: importlib.metadata.EntryPoint
) -> None:
    before = set(commands.choices)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what it prints is no command's output
            command = ep.load()
            for method in ("add_parser", "run"):
                if not callable(getattr(command, method, None)):
                    message = f"{ep.value} has no {method}(); see plugtrain.commands.plugin"
                    raise PluginContractError(message)  # noqa: TRY301 - reported as any failure
            parser = command.add_parser(commands, provider.command)
            if not isinstance(parser, argparse.ArgumentParser) or (
                commands.choices.get(provider.command) is not parser
            ):
                message = (
                    f"add_parser(commands, {provider.command!r}) must return the parser it "
                    f"added with commands.add_parser({provider.command!r}, ...)"
                )
                raise PluginContractError(message)  # noqa: TRY301 - reported as any failure
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - isolate a command that cannot load
        _forget(commands, set(commands.choices) - before)
        failed = PluginLoadError(
            f"command {provider.command!r} of {provider} failed to load: {_describe(exc)}"
        )
        failed.__cause__ = exc
        help_text = f"(unavailable: {provider.who} failed to load it; run it to see why)"
        _add_unavailable(commands, provider.command, failed, help_text)
        return
    passthrough = [a.dest for a in parser._actions if a.nargs == argparse.REMAINDER]
    if "-" in parser.prefix_chars or not passthrough:
        passthrough = []
    parser.set_defaults(handler=_Runner(provider, command), passthrough=passthrough)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): it called sys.exit()"
    return f"{type(exc).__name__}: {exc}"


def _forget(commands: Subcommands, names: set[str]) -> None:
    """Take back what a failing ``add_parser`` added."""
    for name in names:
        del commands._name_parser_map[name]
    commands._choices_actions[:] = [a for a in commands._choices_actions if a.dest not in names]


def _add_unavailable(
    commands: Subcommands, name: str, error: PlugtrainError, text: str | None
) -> None:
    """A command that takes any words and raises ``error`` (``text`` its help; ``None``: hidden)."""
    if text is None:  # argparse lists a command only when it is given a help text
        parser = commands.add_parser(name, add_help=False, prefix_chars="\0")
    else:
        parser = commands.add_parser(name, help=text, add_help=False, prefix_chars="\0")
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=_Unavailable(error), passthrough=["arguments"])


@attrs.frozen
class _Unavailable:
    error: PlugtrainError

    def __call__(self, args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
        raise self.error


@attrs.frozen
class _Runner:
    """Runs a plugin command; an error of its own code is blamed on its distribution."""

    provider: Provider
    command: PluginCommand

    def __call__(self, args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
        name = self.provider.command
        try:
            status: object = self.command.run(args, out)
        except PlugtrainError:
            raise
        except Exception as exc:
            if args.traceback:
                raise
            message = f"command {name!r} of {self.provider} raised {_describe(exc)}"
            raise ComponentError(message) from exc
        if not isinstance(status, int):
            message = f"command {name!r} of {self.provider} returned {status!r}, not an exit status"
            raise PluginContractError(message)
        return status
