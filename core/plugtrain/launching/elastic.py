"""Starting processes through PyTorch's elastic launcher (torchrun), and what their failures mean.

One machine runs torchrun with ``--standalone``; more than one
(:class:`plugtrain.launching.NodeSettings`, ``num_nodes`` above 1) runs the same command on
every machine with the c10d rendezvous at ``rdzv_endpoint``; ``max_restarts`` restarts the
workers after a failure (they resume from the newest checkpoint).

SIGTERM, SIGINT or SIGHUP to the launcher is forwarded by torchrun to every worker; the workers
agree on a step, save it once and stop, and the launcher exits ``128 + signal`` naming the newest
checkpoint. torchrun kills workers that take longer than its shutdown timeout (30 s, or
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``). Nothing here imports torch until a launch is needed.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plugtrain.errors import BackendError
from plugtrain.launching import cluster
from plugtrain.launching.processes import NodeSettings, launched_process
from plugtrain.train.distributed import TrainingInterrupted, signal_name

if TYPE_CHECKING:
    pass

__all__ = ["cluster_environment", "collective_errors", "torchrun", "torchrun_arguments"]

log = logging.getLogger("plugtrain")


def cluster_environment(nodes: NodeSettings, environ: Any = None) -> str:
    """``torchrun``, ``slurm`` or ``none``: who placed this process (``cluster_environment``).

    :raises BackendError: when the environment named explicitly has not placed it.
    """
    environ = os.environ if environ is None else environ
    chosen = nodes.cluster_environment
    if chosen == "torchrun" and not cluster.is_torchrun_process(environ):
        message = (
            "cluster_environment: torchrun, but RANK and WORLD_SIZE are not set: start the "
            "program with torchrun, or use cluster_environment: auto"
        )
        raise BackendError(message)
    if chosen == "slurm" and "SLURM_PROCID" not in environ:
        message = (
            "cluster_environment: slurm, but SLURM_PROCID is not set: start the run with "
            "`srun plugtrain fit RUN.yaml` inside a SLURM job, or use cluster_environment: auto"
        )
        raise BackendError(message)
    if chosen in ("torchrun", "slurm"):
        return chosen
    if cluster.is_torchrun_process(environ):
        return "torchrun"
    if chosen == "auto" and cluster.is_slurm_job_step(environ):
        return "slurm"
    return "none"


_TORCHRUN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")

_FRESH_STORE_SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
"""With ``1``, torchrun's rank-0 worker hosts a new TCPStore on a new port in every rendezvous
round, instead of every round's workers sharing the agents' one store (torch's default since
2.4), where a restarted group finds the keys its failed predecessor left and may not form."""


def torchrun_arguments(nproc_per_node: int, nodes: NodeSettings) -> list[str]:
    """The torchrun options for ``nproc_per_node`` processes here and the run's node settings.

    One machine: ``--standalone``. Several: the c10d rendezvous at ``rdzv_endpoint`` under
    ``rdzv_id``, with ``rdzv_timeout`` as its join and read timeouts; node 0 (``node_rank``,
    else ``$NODE_RANK``) hosts the rendezvous store, the others connect to it.

    :raises BackendError: when several machines are asked for without an ``rdzv_endpoint``.
    """
    restarts = [f"--nproc-per-node={nproc_per_node}", f"--max-restarts={nodes.max_restarts}"]
    if nodes.num_nodes == 1:
        return ["--standalone", *restarts]
    if nodes.rdzv_endpoint is None:
        message = (
            f"num_nodes={nodes.num_nodes} needs rdzv_endpoint, the host:port of node 0 that "
            "every machine can reach (e.g. --set trainer.init.backend.rdzv_endpoint=node0:29400)"
        )
        raise BackendError(message)
    timeout = math.ceil(nodes.rdzv_timeout)
    conf = f"join_timeout={timeout},read_timeout={timeout}"
    node_rank = nodes.resolved_node_rank()
    if node_rank is not None:
        conf += f",is_host={'true' if node_rank == 0 else 'false'}"
    run_id = nodes.rdzv_id or os.environ.get("SLURM_JOB_ID") or "plugtrain"
    return [
        f"--nnodes={nodes.num_nodes}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={nodes.rdzv_endpoint}",
        f"--rdzv-id={run_id}",
        f"--rdzv-conf={conf}",
        *restarts,
    ]


def torchrun(
    nproc_per_node: int,
    command: Sequence[str],
    newest_checkpoints: Callable[[], Sequence[Path]] = list,
    *,
    nodes: NodeSettings | None = None,
) -> int:
    """Run ``command`` (torchrun's script arguments) on ``nproc_per_node`` local processes.

    :param newest_checkpoints: lists the run's newest checkpoints, named in the message when
        the run is stopped by a signal.
    :param nodes: the run's node settings (default: one machine, no restarts).
    :raises TrainingInterrupted: when a signal stopped the run (after the workers saved).
    :raises BackendError: when the machines do not meet within ``rdzv_timeout`` (naming the
        endpoint), or when a worker fails and no restart is left (the last attempt's failure).
    """
    from torch.distributed import run as torch_run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    nodes = nodes or NodeSettings()
    arguments = [*torchrun_arguments(nproc_per_node, nodes), *command]
    if nodes.num_nodes > 1:
        log.info(
            "starting %d processes with torchrun, one of %d machines meeting at %s",
            nproc_per_node,
            nodes.num_nodes,
            nodes.rdzv_endpoint,
        )
    else:
        log.info("starting %d processes with torchrun", nproc_per_node)
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in _TORCHRUN_SIGNALS}
    # A fresh store per rendezvous round: restarted workers never see a failed round's keys.
    os.environ.setdefault(_FRESH_STORE_SWITCH, "1")
    try:
        torch_run.run(torch_run.parse_args(arguments))
    except RendezvousError as exc:
        raise BackendError(_rendezvous_failed(nodes, exc)) from None
    except SignalException as exc:  # torchrun forwarded it to the workers, which saved
        message = _stopped(exc.sigval, f"the {nproc_per_node} processes", newest_checkpoints())
        raise TrainingInterrupted(message, exc.sigval) from None
    except ChildFailedError as exc:
        stopped = _stopped_by_signal(exc)
        if stopped is not None:  # the workers themselves were signalled and stopped cleanly
            message = _stopped(stopped, f"the {nproc_per_node} processes", newest_checkpoints())
            raise TrainingInterrupted(message, stopped) from None
        failed = _describe_failures(nproc_per_node, exc)
        if nodes.max_restarts:
            failed += f" (the last of {nodes.max_restarts + 1} attempts)"
        raise BackendError(failed) from None
    finally:
        for name, handler in handlers.items():
            signal.signal(getattr(signal, name), signal.SIG_DFL if handler is None else handler)
    return 0


def _rendezvous_failed(nodes: NodeSettings, error: BaseException) -> str:
    cause = type(error).__name__
    if str(error).strip():
        cause += ": " + str(error).strip().splitlines()[0].rstrip(".")
    where = nodes.rdzv_endpoint or "the local rendezvous"
    return (
        f"the {nodes.num_nodes} machine(s) did not meet at the rendezvous {where} within "
        f"rdzv_timeout ({nodes.rdzv_timeout:g} s): {cause}. Check "
        "that rdzv_endpoint is node 0's host and a free port every machine can reach, and "
        "that every machine runs the same command with the same num_nodes and rdzv_id"
    )


def _stopped_by_signal(error: Any) -> int | None:
    """The signal when the first failed worker exited ``128 + SIGINT/SIGTERM/SIGHUP``."""
    _rank, first = error.get_first_failure()
    stops = {128 + int(s): int(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    return stops.get(first.exitcode)


def _stopped(signal_number: int, who: str, newest: Sequence[Path]) -> str:
    found = ", ".join(str(path) for path in newest)
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
