"""Starting a data-parallel run through PyTorch's elastic launcher (torchrun).

``plugtrain fit RUN.yaml`` asks each trainer's backend how many processes it wants on this
machine (a backend class may define ``processes_per_node(arguments) -> int``). Above one, it
runs ``torch.distributed.run`` (torchrun) in this process with
``--standalone --nproc-per-node N -m plugtrain <the same command line>``; each worker sees
torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and runs the file itself. A process that
already has those variables (started by an outside ``torchrun``, possibly on several machines)
is never launched again. Nothing here imports torch until a launch is needed.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from plugtrain.errors import BackendError, ConfigError, ConfigIssue

__all__ = [
    "LaunchedProcess",
    "collective_errors",
    "exit_worker_when_done",
    "is_main_rank",
    "launch_if_needed",
    "launched_process",
    "processes_wanted",
]

log = logging.getLogger("plugtrain")


@attrs.frozen
class LaunchedProcess:
    """Where a process started by torchrun (or a compatible launcher) stands.

    :param rank: global rank.
    :param local_rank: rank on this machine.
    :param world_size: number of processes in the run.
    """

    rank: int
    local_rank: int
    world_size: int


def launched_process(environ: Mapping[str, str] | None = None) -> LaunchedProcess | None:
    """The ranks of this process from torchrun's variables, or ``None`` when nobody launched it."""
    environ = os.environ if environ is None else environ
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    try:
        rank, world_size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
        local_rank = int(environ.get("LOCAL_RANK", rank))
    except ValueError:
        message = (
            "RANK, WORLD_SIZE and LOCAL_RANK must be integers, got "
            f"{environ.get('RANK')!r}, {environ.get('WORLD_SIZE')!r}, "
            f"{environ.get('LOCAL_RANK')!r}"
        )
        raise BackendError(message) from None
    return LaunchedProcess(rank=rank, local_rank=local_rank, world_size=world_size)


def is_main_rank() -> bool:
    """Whether this process is rank 0 (or not launched at all): the one that prints results."""
    launched = launched_process()
    return launched is None or launched.rank == 0


def processes_wanted(plans: Sequence[Any], registry: Any) -> int:
    """How many processes on this machine the run's trainers ask for (they must agree).

    :raises ConfigError: when two trainers ask for different numbers.
    """
    wanted: dict[int, str] = {}
    for plan in plans:
        backend = plan.init.get("backend")
        arguments = {k: v for k, v in (backend or {}).items() if k != "backend_type"}
        implementation = registry.resolve("backend", plan.backend_type)
        ask = getattr(implementation, "processes_per_node", None)
        count = int(ask(arguments)) if callable(ask) else 1
        wanted.setdefault(count, plan.path)
    if len(wanted) > 1:
        listed = ", ".join(f"{path} asks for {count}" for count, path in wanted.items())
        message = f"every trainer of a run file must use the same number of processes: {listed}"
        raise ConfigError([ConfigIssue("trainer", message)])
    return next(iter(wanted), 1)


def launch_if_needed(run_file: str, overrides: Sequence[str], argv: Sequence[str]) -> int | None:
    """Start the run under torchrun when it asks for several processes and nobody launched it.

    :param argv: this command line without the program name; each worker runs it again.
    :returns: ``None`` when this process should run the file itself, else the exit status.
    :raises BackendError: when a worker fails, naming each failed rank and how it ended.
    """
    if launched_process() is not None:
        return None
    from plugtrain import plugins
    from plugtrain.train.run import check_run_file

    plans = check_run_file(run_file, overrides, import_plugins=True)
    count = processes_wanted(plans, plugins.get_registry())
    if count <= 1:
        return None
    return torchrun(count, ["-m", "plugtrain", *argv])


def torchrun(nproc_per_node: int, command: Sequence[str]) -> int:
    """Run ``command`` (torchrun's script arguments) on ``nproc_per_node`` local processes."""
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    arguments = ["--standalone", f"--nproc-per-node={nproc_per_node}", *command]
    log.info("starting %d processes with torchrun", nproc_per_node)
    try:
        torch_run.run(torch_run.parse_args(arguments))
    except ChildFailedError as exc:
        raise BackendError(_describe_failures(nproc_per_node, exc)) from None
    return 0


def _describe_failures(count: int, error: Any) -> str:
    """Each failed rank and how it ended, torchrun's root cause (first failure) first."""
    first_rank, _first = error.get_first_failure()
    ordered = sorted(error.failures.items(), key=lambda item: (item[0] != first_rank, item[0]))
    parts = []
    for rank, failure in ordered:
        if failure.exitcode < 0:
            how = f"was killed by signal {failure.signal_name()}"
        else:
            how = f"exited with status {failure.exitcode}"
        if rank == first_rank:
            note = " (first failure)"
        elif failure.signal_name() == "SIGTERM":
            note = " (stopped by torchrun after the first failure)"
        else:
            note = ""
        parts.append(f"rank {rank} (pid {failure.pid}) {how}{note}")
    return (
        f"the data-parallel run of {count} processes failed: "
        + "; ".join(parts)
        + ". The failing processes' own messages are above."
    )


@contextmanager
def exit_worker_when_done() -> Iterator[None]:
    """In a launched worker of several, end the process at once after the block succeeds.

    Works around a torch bug: a DDP-over-gloo worker sometimes aborts while the interpreter
    shuts down ("terminate called without an active exception", SIGABRT) after its work is
    done; reproduced with torch 2.13 and a ten-line script in about one run of ten. Output is
    flushed and logging shut down first; errors leave through the normal path.
    """
    yield
    launched = launched_process()
    if launched is None or launched.world_size == 1:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(0)


_COLLECTIVE_HINTS = ("gloo", "nccl", "connection closed by peer", "timed out", "connection reset")


@contextmanager
def collective_errors() -> Iterator[None]:
    """Turn a failed collective in a launched process into a :class:`BackendError` that says why.

    A collective fails when another rank died (its peers see the connection close) or stopped
    answering (they wait for the process-group timeout, then fail).
    """
    try:
        yield
    except RuntimeError as exc:
        launched = launched_process()
        if launched is None or launched.world_size == 1 or not _is_collective_failure(exc):
            raise
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = (
            f"rank {launched.rank} of {launched.world_size}: a collective operation failed "
            "because another process of the run died or did not answer within the "
            f"process-group timeout (dist_timeout). Cause: {cause}"
        )
        raise BackendError(message) from exc


def _is_collective_failure(exc: BaseException) -> bool:
    torch_distributed = sys.modules.get("torch.distributed")
    error_type = getattr(torch_distributed, "DistError", None)
    if error_type is not None and isinstance(exc, error_type):
        return True
    text = str(exc).lower()
    return any(hint in text for hint in _COLLECTIVE_HINTS)
