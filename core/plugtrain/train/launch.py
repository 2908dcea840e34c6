"""Starting a data-parallel run through PyTorch's elastic launcher (torchrun).

``plugtrain fit RUN.yaml`` asks each trainer's backend class how many processes it wants on this
machine (``processes_per_node(arguments) -> int`` of the Backend protocol). Above one, it
runs ``torch.distributed.run`` (torchrun) in this process with
``--standalone --nproc-per-node N -m plugtrain <the same command line>``; each worker sees
torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and runs the file itself. A process that
already has those variables (started by an outside ``torchrun``, possibly on several machines)
is never launched again. Nothing here imports torch until a launch is needed.

SIGTERM, SIGINT or SIGHUP to the launcher is forwarded by torchrun to every worker; the workers
agree on a step, save it once and stop, and the launcher exits ``128 + signal`` naming the newest
checkpoint. torchrun kills workers that take longer than its shutdown timeout (30 s, or
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from plugtrain.config.sections import CheckpointSettings
from plugtrain.errors import BackendError, ConfigError, ConfigIssue
from plugtrain.launching import launched_process

if TYPE_CHECKING:
    from plugtrain.config.plan import RunPlan, TrainerPlan
    from plugtrain.registry import Registry

__all__ = [
    "collective_errors",
    "launch_if_needed",
    "processes_wanted",
    "torchrun",
]

log = logging.getLogger("plugtrain")


def processes_wanted(plans: Iterable[TrainerPlan], registry: Registry) -> int:
    """How many processes on this machine the run's trainers ask for (they must agree).

    Each trainer's backend class answers through the Backend protocol's
    ``processes_per_node(arguments)``.

    :raises ConfigError: when two trainers ask for different numbers.
    :raises BackendError: when a backend class does not implement ``processes_per_node``.
    """
    wanted: dict[int, str] = {}
    for plan in plans:
        component = registry.lookup("backend", plan.backend_type)
        implementation = registry.resolve("backend", plan.backend_type)
        if not callable(getattr(implementation, "processes_per_node", None)):
            message = (
                f"backend {component.name!r} from {component.provider} does not implement "
                "processes_per_node(arguments) of the Backend protocol "
                "(plugtrain.protocols.Backend); subclass plugtrain.backend_base.BackendBase"
            )
            raise BackendError(message)
        count = int(implementation.processes_per_node(plan.backend.call_arguments()))
        wanted.setdefault(count, plan.path)
    if len(wanted) > 1:
        listed = ", ".join(f"{path} asks for {count}" for count, path in wanted.items())
        message = f"every trainer of a run file must use the same number of processes: {listed}"
        raise ConfigError([ConfigIssue("trainer", message)])
    return next(iter(wanted), 1)


def launch_if_needed(plan: RunPlan, registry: Registry, argv: Sequence[str]) -> int | None:
    """Start the run under torchrun when it asks for several processes and nobody launched it.

    :param plan: the validated run; each worker validates the file again on its own.
    :param registry: the registry the plan was validated with.
    :param argv: this command line without the program name; each worker runs it again.
    :returns: ``None`` when this process should run the file itself, else the exit status.
    :raises BackendError: when a worker fails, naming each failed rank and how it ended.
    """
    if launched_process() is not None:
        return None
    count = processes_wanted(plan.trainers, registry)
    if count <= 1:
        return None
    return torchrun(count, ["-m", "plugtrain", *argv], _checkpoint_places(plan.trainers))


def _checkpoint_places(trainers: Sequence[Any]) -> list[tuple[str, str]]:
    """``(folder, checkpoint_name)`` of each trainer, the folder where rank 0 saves."""
    places = []
    for trainer in trainers:
        checkpoint = trainer.checkpoint or CheckpointSettings()
        folder = checkpoint.checkpoint_root or trainer.model_dir
        places.append((str(folder), checkpoint.checkpoint_name))
    return places


_TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


def torchrun(
    nproc_per_node: int, command: Sequence[str], checkpoints: Sequence[tuple[str, str]] = ()
) -> int:
    """Run ``command`` (torchrun's script arguments) on ``nproc_per_node`` local processes.

    :param checkpoints: ``(model_dir, checkpoint_name)`` of the run's trainers, named in the
        message when the run is stopped by a signal.
    :raises TrainingInterrupted: when a signal stopped the run (after the workers saved).
    """
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from plugtrain.train.interrupt import TrainingInterrupted

    arguments = ["--standalone", f"--nproc-per-node={nproc_per_node}", *command]
    log.info("starting %d processes with torchrun", nproc_per_node)
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in _TORCHRUN_SIGNALS}
    try:
        torch_run.run(torch_run.parse_args(arguments))
    except SignalException as exc:  # torchrun forwarded it to the workers, which saved
        message = _stopped(exc.sigval, f"the {nproc_per_node} processes", checkpoints)
        raise TrainingInterrupted(message, exc.sigval) from None
    except ChildFailedError as exc:
        stopped = _stopped_by_signal(exc)
        if stopped is not None:  # the workers themselves were signalled and stopped cleanly
            message = _stopped(stopped, f"the {nproc_per_node} processes", checkpoints)
            raise TrainingInterrupted(message, stopped) from None
        raise BackendError(_describe_failures(nproc_per_node, exc)) from None
    finally:
        for name, handler in handlers.items():
            signal.signal(getattr(signal, name), signal.SIG_DFL if handler is None else handler)
    return 0


def _stopped_by_signal(error: Any) -> int | None:
    """The signal when the first failed worker exited ``128 + SIGINT/SIGTERM/SIGHUP``."""
    _rank, first = error.get_first_failure()
    stops = {128 + int(s): int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    return stops.get(first.exitcode)


def _stopped(signal_number: int, who: str, checkpoints: Sequence[tuple[str, str]]) -> str:
    from plugtrain.train.checkpoint import find_latest
    from plugtrain.train.interrupt import signal_name

    newest = [find_latest(model_dir, name) for model_dir, name in checkpoints]
    found = ", ".join(str(path) for path in newest if path is not None)
    kept = f"the newest checkpoint is {found}" if found else "no checkpoint was saved"
    return (
        f"interrupted by {signal_name(signal_number)}: {who} were asked to save their step "
        f"and stop; {kept}; run the same command again to resume"
    )


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
