"""What a backend needs to know about the processes ``plugtrain fit`` launches (torch-free).

``plugtrain fit RUN.yaml`` asks each trainer's backend class how many processes it wants on this
machine, ``processes_per_node(arguments)`` of :class:`plugtrain.protocols.Backend`. Above one,
it starts them with PyTorch's elastic launcher (torchrun), which gives each process the
variables ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`launched_process` reads them. A
backend whose process teardown is known to crash calls :func:`exit_after_atexit_handlers`, and
the command line ends the process right after its ``atexit`` handlers
(:func:`exit_worker_when_done`).

More than one machine: a backend whose schema declares the node keys of :class:`NodeSettings`
(``num_nodes``, ``node_rank``, ``rdzv_endpoint``, ``rdzv_id``, ``rdzv_timeout``,
``max_restarts``, ``cluster_environment``, ``requeue_signal``; declare them with
:func:`node_args`' factories and check them with :func:`node_problems`) gets multi-node
launches, SLURM and elastic restarts from ``plugtrain fit`` (``docs/multi-node.md``).

This module is part of the plugin API (``docs/plugin-api.md``): the CPU and GPU backends of
``plugtrain-backends`` use it, and a third party's backend can do exactly what they do.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from plugtrain.errors import BackendError
from plugtrain.registry.schema import Problem, about, arg

__all__ = [
    "CLUSTER_ENVIRONMENTS",
    "REQUEUE_SIGNALS",
    "LaunchedProcess",
    "NodeSettings",
    "exit_after_atexit_handlers",
    "exit_worker_when_done",
    "is_main_rank",
    "launched_process",
    "node_args",
    "node_problems",
]

log = logging.getLogger("plugtrain")

CLUSTER_ENVIRONMENTS = ("auto", "torchrun", "slurm", "none")
"""Who says where each process stands: ``auto`` (torchrun's variables, else those of a SLURM job
step of several tasks, else nobody), ``torchrun``, ``slurm``, or ``none`` (plugtrain launches)."""

REQUEUE_SIGNALS = tuple(
    name
    for name in ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGCONT", "SIGURG")
    if hasattr(signal, name)
)
"""The signal names ``requeue_signal`` accepts (those a scheduler sends ahead of a kill)."""

DEFAULT_RDZV_PORT = 29400
"""torchrun's default rendezvous port, used when ``rdzv_endpoint`` names no port."""


def node_args() -> dict[str, Any]:
    """The node keys of a backend schema, each an :func:`~plugtrain.schema.arg` to declare.

    A backend schema declares them under these names and types (the CPU and GPU backends do)::

        _nodes = node_args()
        num_nodes: int = _nodes["num_nodes"]
        node_rank: int | None = _nodes["node_rank"]
        rdzv_endpoint: str | None = _nodes["rdzv_endpoint"]
        rdzv_id: str | None = _nodes["rdzv_id"]
        rdzv_timeout: float = _nodes["rdzv_timeout"]
        max_restarts: int = _nodes["max_restarts"]
        cluster_environment: str = _nodes["cluster_environment"]
        requeue_signal: str | None = _nodes["requeue_signal"]

    and yields :func:`node_problems` from its ``cross_check``.
    """
    return {
        "num_nodes": arg(
            1,
            help="machines of the run; above 1, `plugtrain fit` joins them with torchrun's c10d "
            "rendezvous at rdzv_endpoint (torchrun's --nnodes)",
            gt=0,
            aliases=("nnodes",),
        ),
        "node_rank": arg(
            None,
            help="this machine's index, 0 hosts the rendezvous (None: $NODE_RANK, else decided "
            "by rdzv_endpoint's host); give it with --set or the environment",
            ge=0,
        ),
        "rdzv_endpoint": arg(
            None, help="host:port where the machines meet (torchrun's --rdzv-endpoint)"
        ),
        "rdzv_id": arg(
            None, help="the run's name at the rendezvous (None: $SLURM_JOB_ID, else 'plugtrain')"
        ),
        "rdzv_timeout": arg(
            900.0, help="seconds the machines wait for each other to join before failing", gt=0
        ),
        "max_restarts": arg(
            0,
            help="times the workers are restarted after a failure, resuming from the newest "
            "checkpoint (torchrun's --max-restarts)",
            ge=0,
        ),
        "cluster_environment": arg(
            "auto",
            help="who says where each process stands: auto, torchrun, slurm or none",
            choices=CLUSTER_ENVIRONMENTS,
        ),
        "requeue_signal": arg(
            "SIGUSR1",
            help="under SLURM, the signal that saves the step, requeues the job and exits "
            "(None: not handled)",
            choices=(*REQUEUE_SIGNALS, None),
        ),
    }


def node_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """What the node keys of ``arguments`` get wrong together (for a schema's ``cross_check``)."""
    endpoint = arguments.get("rdzv_endpoint")
    if endpoint is not None and _split_endpoint(endpoint) is None:
        message = f"rdzv_endpoint must look like host:port (port 1-65535), got {endpoint!r}"
        yield about("rdzv_endpoint", message)
    nodes = int(arguments.get("num_nodes", 1))
    node_rank = arguments.get("node_rank")
    if node_rank is not None and node_rank >= nodes:
        message = f"node_rank must be below num_nodes ({nodes}), got {node_rank}"
        yield about(("node_rank", "num_nodes"), message)
    environment = arguments.get("cluster_environment", "auto")
    if nodes > 1 and endpoint is None and environment == "none":
        message = (
            f"num_nodes={nodes} needs rdzv_endpoint (host:port of node 0) with "
            "cluster_environment: none"
        )
        yield about(("rdzv_endpoint", "num_nodes"), message)


def _split_endpoint(endpoint: str) -> tuple[str, int] | None:
    host, colon, port = endpoint.rpartition(":")
    if not colon or not host.strip() or not port.isdigit() or not 0 < int(port) <= 65535:
        return None
    return host.strip("[]"), int(port)


@attrs.frozen
class NodeSettings:
    """The node keys of a backend's arguments (defaults where a backend does not declare them).

    :param num_nodes: machines of the run.
    :param node_rank: this machine's index (``None``: from the environment, or none).
    :param rdzv_endpoint: ``host:port`` where the machines meet.
    :param rdzv_id: the run's name at the rendezvous.
    :param rdzv_timeout: seconds the machines wait for each other.
    :param max_restarts: restarts of the workers after a failure.
    :param cluster_environment: one of :data:`CLUSTER_ENVIRONMENTS`.
    :param requeue_signal: the SLURM requeue signal's name, or ``None``.
    """

    num_nodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None
    rdzv_timeout: float = 900.0
    max_restarts: int = 0
    cluster_environment: str = "auto"
    requeue_signal: str | None = "SIGUSR1"

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> NodeSettings:
        """The settings among a backend's (validated) arguments; absent keys keep defaults."""
        known = {f.name for f in attrs.fields(cls)}
        given = {k: v for k, v in arguments.items() if k in known}
        if "nnodes" in arguments and "num_nodes" not in given:
            given["num_nodes"] = arguments["nnodes"]
        return cls(**given)

    def endpoint(self) -> tuple[str, int] | None:
        """``(host, port)`` of :attr:`rdzv_endpoint` (``None`` when unset)."""
        if self.rdzv_endpoint is None:
            return None
        return _split_endpoint(self.rdzv_endpoint)

    def resolved_node_rank(self, environ: Mapping[str, str] | None = None) -> int | None:
        """:attr:`node_rank`, else ``$NODE_RANK`` (torchrun's ``$PET_NODE_RANK`` too), else None.

        :raises BackendError: when the variable is not an integer below ``num_nodes``.
        """
        if self.node_rank is not None:
            return self.node_rank
        environ = os.environ if environ is None else environ
        for name in ("NODE_RANK", "PET_NODE_RANK"):
            value = environ.get(name)
            if value is None:
                continue
            if not value.strip().isdigit() or int(value) >= self.num_nodes:
                message = (
                    f"{name}={value!r} must be a node index below num_nodes ({self.num_nodes})"
                )
                raise BackendError(message)
            return int(value)
        return None

    def signal_number(self) -> int | None:
        """The number of :attr:`requeue_signal` (``None`` when unset)."""
        if self.requeue_signal is None:
            return None
        return int(getattr(signal, self.requeue_signal))


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


_exit_reason: str | None = None


def exit_after_atexit_handlers(reason: str) -> None:
    """Ask ``plugtrain fit`` to end this process once its work is done and atexit handlers ran.

    For a backend whose teardown is known to crash the interpreter's own shutdown: the process
    then skips only what comes after the ``atexit`` handlers (module and C++ teardown). Called by
    the gloo process group of ``plugtrain-backends`` when it leaves, on the torch versions that
    need it.

    :param reason: why, for the debug log.
    """
    global _exit_reason  # noqa: PLW0603 - one process, one way to end it
    _exit_reason = reason


@contextmanager
def exit_worker_when_done() -> Iterator[None]:
    """End the process right after the block succeeds, when a backend asked for it.

    Only after :func:`exit_after_atexit_handlers` was called (otherwise the process ends as
    usual): output is flushed, every ``atexit`` handler runs, logging is shut down, and the
    process exits with status 0 without the interpreter's teardown. Errors leave through the
    normal path, except a stop on a signal
    (:class:`~plugtrain.train.distributed.signals.TrainingInterrupted`) in a launched run of several
    processes: rank 0 prints where it saved, and every worker exits ``128 + signal`` the same
    way, after its ``atexit`` handlers.
    """
    launched = launched_process()
    several = launched is not None and launched.world_size > 1
    try:
        yield
    except KeyboardInterrupt as exc:
        status = getattr(exc, "exit_status", None)
        if not several or status is None:
            raise
        if launched is not None and launched.rank == 0:
            sys.stderr.write(f"plugtrain: {exc}\n")
        _exit_now(int(status))
    if _exit_reason is None:
        return
    log.debug("ending the process after its atexit handlers: %s", _exit_reason)
    _exit_now(0)


def _exit_now(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
