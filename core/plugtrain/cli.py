"""The ``plugtrain`` command (also ``python -m plugtrain``).

Listing commands (``list``, ``show``, ``plugins``) never import torch or any implementation.
Errors are printed without a traceback (``--traceback``, anywhere on the command line, shows it).

Exit statuses: 0 success; 2 a usage error: a bad command line, a bad run file or argument, an
unknown name (of a component or a kind, in every command); 1 any other error (training, a
backend, a plugin's own code); 130, 143 or 129 when stopped by SIGINT, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from plugtrain import plugins
from plugtrain._suggest import did_you_mean
from plugtrain.attribution import attribute_error
from plugtrain.errors import ConfigError, ConfigIssue, PlugtrainError, UnknownNameError
from plugtrain.kinds import KINDS
from plugtrain.registry import Component, ComponentInfo, Registry

if TYPE_CHECKING:
    from plugtrain.config.plan import TrainerPlan

__all__ = ["main"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2

Command = Callable[[argparse.Namespace, Registry, TextIO], int]


def _registry(args: argparse.Namespace) -> Registry:
    settings = plugins.PluginSettings.from_env(args.plugin)
    plugins.reset(settings)
    return plugins.get_registry()


# -- list ------------------------------------------------------------------------------------


def _cmd_list(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    if args.markdown:
        from plugtrain.authoring.reference import components_markdown

        return _write(components_markdown(registry, args.kind), args.output, out)
    if args.output is not None:
        import io

        buffer = io.StringIO()
        _list_components(args, registry, buffer)
        return _write(buffer.getvalue(), args.output, out)
    return _list_components(args, registry, out)


def _list_components(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    components = registry.components(args.kind)
    if args.json:
        rows = [_list_row(c) for c in components]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    rows = [_list_row(c) for c in components]
    table = [
        (r["name"], r["kind"], r["provider"] or "", r["version"] or "", r["summary"]) for r in rows
    ]
    _print_table(("NAME", "KIND", "PROVIDER", "VERSION", "SUMMARY"), table, out)
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


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (header, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)]
        out.write("  ".join([*cells, row[-1]]).rstrip() + "\n")


# -- show ------------------------------------------------------------------------------------


def _cmd_show(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    if args.kind:
        found = [registry.lookup(args.kind, args.name)]
    else:
        found = registry.find(args.name)
        if not found:
            raise UnknownNameError(_not_found_message(registry, args.name))
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


# -- plugins ---------------------------------------------------------------------------------


def _cmd_plugins(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    rows = plugins.plugin_summary(registry)
    if args.json:
        json.dump(rows, out, indent=2)
        out.write("\n")
        return EXIT_OK
    from plugtrain._version import PLUGIN_API_VERSION, __version__

    out.write(f"plugtrain {__version__} provides plugin API {PLUGIN_API_VERSION}\n")
    for row in rows:
        provider = f"{row['distribution']} {row['version']}" if row["distribution"] else "local"
        out.write(f"{row['name']}: {provider} [{row['status']}] ({row['module']})\n")
        if row["api"] is not None:
            declared = ", ".join(row["api"]) or "not declared"
            out.write(f"    plugin API: {declared}\n")
        if row["error"]:
            out.write(f"    error: {row['error']}\n")
        if row["hooks"]:
            out.write(f"    hooks: {', '.join(row['hooks'])}\n")
        for kind, names in row["components"].items():
            plural = KINDS[kind].plural if kind in KINDS else f"{kind}s"
            out.write(f"    {plural}: {', '.join(names)}\n")
    if not rows:
        out.write("no plugins found\n")
    return EXIT_OK


# -- preprocess ------------------------------------------------------------------------------

PREPROCESS = "plugtrain_models.data.preprocess"
"""The module behind ``plugtrain preprocess`` (of plugtrain-models: the core has no HDF5 data)."""


def _cmd_preprocess(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    """Hand the command line to plugtrain-models' ``preprocess``; say to install it if absent."""
    import importlib

    from plugtrain.errors import MissingDependencyError

    try:
        module = importlib.import_module(PREPROCESS)
    except ModuleNotFoundError as exc:
        if exc.name is None or not PREPROCESS.startswith(exc.name):
            raise
        message = (
            "plugtrain preprocess writes Model Zoo's GPT HDF5 files and comes with "
            "plugtrain-models, which is not installed: pip install plugtrain-models"
        )
        raise MissingDependencyError(message) from exc
    status: int = module.main(args.arguments, out)
    return status


# -- run files -------------------------------------------------------------------------------


def _cmd_check(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from plugtrain.config import load_plan

    plan, run_registry = load_plan(args.run_file, args.set)
    for warning in plan.warnings:
        sys.stderr.write(f"plugtrain: warning: {warning}\n")
    deep = _check_world(args, plan, run_registry)
    for trainer in plan.trainers:
        sparsity = ", ".join(group.algorithm for group in trainer.sparsity)
        sparse = f"; sparsity {sparsity}" if sparsity else ""
        out.write(
            f"{trainer.path}: backend {trainer.backend_type}; {', '.join(trainer.steps)}{sparse}\n"
        )
    for line in deep:
        out.write(f"{line}\n")
    count = len(plan.trainers)
    out.write(f"{args.run_file}: OK ({count} trainer{'s' if count != 1 else ''})\n")
    return EXIT_OK


def _check_world(args: argparse.Namespace, plan: Any, registry: Registry) -> list[str]:
    """``--world-size N`` (torch-free) and ``--deep`` (a fake process group): report lines."""
    world_size = getattr(args, "world_size", None)
    if world_size is None:
        if getattr(args, "deep", False):
            raise ConfigError([ConfigIssue("--deep", "needs --world-size N")])
        return []
    from plugtrain.config import load_run_file
    from plugtrain.config.world_check import world_size_issues

    data = load_run_file(args.run_file, args.set)
    issues = world_size_issues(data, registry, world_size)
    if issues:
        raise ConfigError(issues)
    if not args.deep:
        return []
    from plugtrain.train.build import deep_check

    return deep_check(plan, registry, data, world_size)


def _cmd_checkpoint(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from plugtrain.train.checkpointing import convert as checkpoint_convert

    if args.action == "convert":
        written = checkpoint_convert.convert(args.source, args.target)
    else:
        written = checkpoint_convert.export(args.source, args.target, args.format)
    out.write(f"{args.source} -> {written}\n")
    return EXIT_OK


def _configure_logging() -> None:
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("plugtrain: %(message)s"))
    logger = logging.getLogger("plugtrain")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _cmd_fit(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from plugtrain import launching
    from plugtrain.config import load_plan
    from plugtrain.train.build import launch_if_needed, requeue_on_signal, run_plan
    from plugtrain.train.distributed import collective_errors

    _configure_logging()
    # Validated once, used throughout; fit and validate import the run file's local plugins.
    plan, run_registry = load_plan(args.run_file, args.set, import_local=True)
    levels = [t.logging.log_level for t in plan.trainers if t.logging is not None]
    if levels:  # Model Zoo's logging.log_level (the first trainer's that sets one)
        import logging

        logging.getLogger("plugtrain").setLevel(levels[0])
    # Several processes asked for: torchrun starts them, each runs this same command line.
    status = launch_if_needed(plan, run_registry, args.argv)
    if status is not None:
        return status
    with launching.exit_worker_when_done():
        with requeue_on_signal(plan), collective_errors():
            results = run_plan(
                plan, run_registry, mode=args.command, after_fit=_schedule_plot_drawer(run_registry)
            )
        for index, metrics in enumerate(results):
            if isinstance(metrics, list) and launching.is_main_rank():  # validate_all's records
                for record in metrics:
                    out.write(f"trainer {index}: {_describe_record(record)}\n")
            elif metrics and launching.is_main_rank():
                shown = ", ".join(f"{name} {value:.4f}" for name, value in metrics.items())
                out.write(f"trainer {index}: validation {shown}\n")
    return EXIT_OK


def _schedule_plot_drawer(registry: Registry) -> Callable[[TrainerPlan, Any], None]:
    """What ``fit`` does after each trainer's fit: draw its schedules into ``schedule.png``."""

    def draw(plan: TrainerPlan, trainer: Any) -> None:
        if not (plan.schedulers or plan.sparsity) or not trainer.is_main_process:
            return
        import logging

        from plugtrain.authoring.schedule_plot import MATPLOTLIB_MISSING, plot_schedules

        log = logging.getLogger("plugtrain")
        try:
            import matplotlib  # noqa: F401 - optional
        except ImportError:
            log.warning("schedule.png not written: %s", MATPLOTLIB_MISSING)
            return
        target = Path(trainer.model_dir) / "schedule.png"
        plot_schedules(
            [spec.to_mapping() for spec in plan.schedulers],
            target,
            steps=trainer.global_step or None,
            registry=registry,
            optimizer=plan.optimizer.spec.to_mapping() if plan.optimizer else None,
            sparsity=plan.sparsity,
        )
        log.info("schedule plot written to %s", target)

    return draw


def _describe_record(record: Mapping[str, Any]) -> str:
    """One validate_all record: which checkpoint and data, then the metrics."""
    checkpoint = record.get("checkpoint") or "the model as it is"
    shown = ", ".join(
        f"{name} {value:.4f}"
        for name, value in record.items()
        if name not in ("checkpoint", "step", "dataloader")
    )
    return (
        f"validation of {checkpoint} (step {record.get('step')}) on {record.get('dataloader')}: "
        f"{shown}"
    )


def _cmd_plot(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from pathlib import Path

    from plugtrain.authoring.schedule_plot import plot_schedules
    from plugtrain.config import load_plan

    plan, run_registry = load_plan(args.run_file, args.set)
    target = Path(args.output)
    drawn = 0
    for index, trainer in enumerate(plan.trainers):
        if not trainer.schedulers and not trainer.sparsity:
            continue
        path = target if len(plan.trainers) == 1 else target.with_stem(f"{target.stem}-{index}")
        loop = trainer.loop
        steps = args.steps or (loop and (loop.max_steps or loop.num_steps))
        specs = [spec.to_mapping() for spec in trainer.schedulers]
        # a stepped scheduler starts from the optimizer's lr
        optimizer = trainer.optimizer.spec.to_mapping() if trainer.optimizer else None
        plot_schedules(
            specs, path, steps or None, run_registry, optimizer=optimizer, sparsity=trainer.sparsity
        )
        out.write(f"{trainer.path}: schedules drawn in {path}\n")
        drawn += 1
    if not drawn:
        out.write(f"{args.run_file}: no schedulers to draw\n")
    return EXIT_OK


# -- schema ----------------------------------------------------------------------------------


def _cmd_schema(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from plugtrain.authoring.jsonschema import dumps, run_file_schema

    return _write(dumps(run_file_schema(registry)), args.output, out)


def _write(text: str, output: str | None, out: TextIO) -> int:
    """Print ``text``, or write it to the file ``output``."""
    if output is None:
        out.write(text)
        return EXIT_OK
    from pathlib import Path

    Path(output).write_text(text, encoding="utf-8")
    out.write(f"wrote {output}\n")
    return EXIT_OK


# -- new -------------------------------------------------------------------------------------


def _cmd_new(args: argparse.Namespace, registry: Registry, out: TextIO) -> int:
    from pathlib import Path

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


# -- parser ----------------------------------------------------------------------------------


def _add_checkpoint_command(commands: Any) -> None:
    checkpoint = commands.add_parser("checkpoint", help="convert or export checkpoints")
    actions = checkpoint.add_subparsers(dest="action", metavar="ACTION", required=True)
    convert = actions.add_parser(
        "convert", help="a single-file checkpoint into a DCP folder, or a DCP folder into a file"
    )
    export = actions.add_parser(
        "export", help="the model weights as a plain state_dict file or safetensors"
    )
    for action in (convert, export):
        action.add_argument("source", help="a checkpoint file or DCP folder")
        action.add_argument("target", help="the new file or folder (must not exist)")
        action.set_defaults(handler=_cmd_checkpoint)
    export.add_argument(
        "--format",
        choices=("torch", "safetensors"),
        default=None,
        help="default: safetensors for a .safetensors target, else torch",
    )


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

    listing = commands.add_parser("list", help="list registered components")
    listing.add_argument("kind", nargs="?", choices=list(KINDS), help="only this kind")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument(
        "--markdown", action="store_true", help="print a Markdown reference with every argument"
    )
    listing.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    listing.set_defaults(handler=_cmd_list)

    show = commands.add_parser("show", help="describe one component")
    show.add_argument("name", help="component name, e.g. SGD")
    show.add_argument("--kind", choices=list(KINDS), help="only look in this kind")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_cmd_show)

    for name, text in (
        ("check", "validate a run file without building anything (no torch import)"),
        ("fit", "train (and evaluate) as a run file says"),
        ("validate", "evaluate as a run file says"),
        ("validate_all", "evaluate every checkpoint on every data set of validate_all"),
        ("plot", "draw the schedules of a run file"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("run_file", metavar="RUN.yaml", help="the run file")
        command.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override a value (YAML); trainer.* applies to every trainer (repeatable)",
        )
        handlers = {
            "check": _cmd_check,
            "fit": _cmd_fit,
            "validate": _cmd_fit,
            "validate_all": _cmd_fit,
            "plot": _cmd_plot,
        }
        command.set_defaults(handler=handlers[name])
        if name == "check":
            _add_world_options(command)
        if name == "plot":
            command.add_argument("-o", "--output", default="schedule.png", help="image file")
            command.add_argument("--steps", type=int, default=None, help="steps to draw")

    _add_checkpoint_command(commands)

    listed = commands.add_parser("plugins", help="installed plugins, their status and components")
    listed.add_argument("--json", action="store_true", help="print JSON")
    listed.set_defaults(handler=_cmd_plugins)

    schema = commands.add_parser(
        "schema", help="JSON Schema of run files with every installed component (for editors)"
    )
    schema.add_argument("-o", "--output", metavar="FILE", help="write FILE instead of printing")
    schema.set_defaults(handler=_cmd_schema)

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
    new.set_defaults(handler=_cmd_new)

    # Its options belong to plugtrain-models ('plugtrain preprocess --help' shows them): every
    # word after the command goes to it as it is (no option prefix here).
    preprocess = commands.add_parser(
        "preprocess",
        help="write Model Zoo GPT HDF5 files from text or the stdlib corpus (plugtrain-models)",
        add_help=False,
        prefix_chars="\0",
    )
    preprocess.add_argument("arguments", nargs=argparse.REMAINDER)
    preprocess.set_defaults(handler=_cmd_preprocess)
    for subcommand in commands.choices.values():  # --traceback and -p after the subcommand too
        if subcommand.prog.endswith(" preprocess"):
            continue
        subcommand.add_argument(
            "--traceback", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        subcommand.add_argument(
            "-p",
            dest="plugin_after",
            action="append",
            default=argparse.SUPPRESS,
            metavar="MODULE",
            help=argparse.SUPPRESS,
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.plugin = [*args.plugin, *getattr(args, "plugin_after", [])]
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.command == "preprocess" and "--traceback" in args.arguments:
        args.arguments.remove("--traceback")
        args.traceback = True
    out = sys.stdout
    try:
        # Machine-read output gets the real stdout; whatever plugin code prints goes to stderr.
        with (
            _logger_restored_afterwards(),
            plugins.restored_afterwards(),
            _stray_prints_to_stderr(args),
        ):
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
