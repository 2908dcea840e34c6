"""Launching a run file's processes: how many its trainers ask for, and torchrun when needed.

``plugtrain fit RUN.yaml`` asks each trainer's backend class how many processes it wants on this
machine (``processes_per_node(arguments) -> int`` of the Backend protocol). Above one, it runs
torchrun in this process (:func:`plugtrain.launching.elastic.torchrun`) with the same command
line; each worker sees torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and runs the file
itself. A process that already has those variables (started by an outside ``torchrun``, possibly
on several machines) is never launched again, and a task of a SLURM job step (``srun plugtrain
fit``) takes its place from SLURM's variables (:mod:`plugtrain.launching.cluster`). Under SLURM the
``requeue_signal`` saves the step, requeues the job and exits (:func:`requeue_on_signal`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from plugtrain.config.sections import CheckpointSettings
from plugtrain.errors import BackendError, ConfigError, ConfigIssue
from plugtrain.launching import cluster
from plugtrain.launching.elastic import cluster_environment, torchrun
from plugtrain.launching.processes import NodeSettings, is_main_rank
from plugtrain.train.checkpointing import find_latest
from plugtrain.train.distributed import TrainingInterrupted, also_stop_on

if TYPE_CHECKING:
    from plugtrain.config.plan import RunPlan, TrainerPlan
    from plugtrain.registry.components import Registry

__all__ = [
    "launch_if_needed",
    "newest_checkpoints",
    "node_settings",
    "processes_wanted",
    "requeue_on_signal",
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


def node_settings(plans: Iterable[TrainerPlan]) -> NodeSettings:
    """The node keys of the run's backends (every trainer must say the same).

    :raises ConfigError: when two trainers' backends disagree.
    """
    found: dict[NodeSettings, str] = {}
    for plan in plans:
        found.setdefault(NodeSettings.from_arguments(plan.backend.call_arguments()), plan.path)
    if len(found) > 1:
        listed = "; ".join(f"{path}: {settings}" for settings, path in found.items())
        message = f"every trainer of a run file must use the same node settings: {listed}"
        raise ConfigError([ConfigIssue("trainer", message)])
    return next(iter(found), NodeSettings())


def launch_if_needed(plan: RunPlan, registry: Registry, argv: Sequence[str]) -> int | None:
    """Start the run under torchrun when it asks for several processes and nobody launched it.

    A task of a SLURM job step gets torchrun's variables from SLURM's and runs the file itself.

    :param plan: the validated run; each worker validates the file again on its own.
    :param registry: the registry the plan was validated with.
    :param argv: this command line without the program name; each worker runs it again.
    :returns: ``None`` when this process should run the file itself, else the exit status.
    :raises BackendError: when a worker fails, naming each failed rank and how it ended.
    """
    nodes = node_settings(plan.trainers)
    environment = cluster_environment(nodes)
    if environment == "slurm":
        variables = cluster.torchrun_variables(os.environ)
        os.environ.update(variables)
        log.debug("SLURM task: %s", variables)
        count = processes_wanted(plan.trainers, registry)
        per_node = cluster.tasks_per_node(os.environ)
        if per_node is not None and per_node < count and variables["RANK"] == "0":
            log.warning(
                "SLURM started %d task(s) per machine, one process each; the backend asks for "
                "%d processes per machine: start one task per process (srun --ntasks-per-node=%d)",
                per_node,
                count,
                count,
            )
        return None
    if environment == "torchrun":
        return None
    count = processes_wanted(plan.trainers, registry)
    if count <= 1 and nodes.num_nodes == 1 and nodes.max_restarts == 0:
        return None
    return torchrun(
        count, ["-m", "plugtrain", *argv], newest_checkpoints(plan.trainers), nodes=nodes
    )


@contextmanager
def requeue_on_signal(plan: RunPlan) -> Iterator[None]:
    """Under SLURM, ``requeue_signal`` stops the run after saving; rank 0 requeues the job.

    The signal joins SIGINT, SIGTERM and SIGHUP as a stop signal of ``fit``: every rank agrees on
    the step, the checkpoint of that step is written, then rank 0 runs ``scontrol requeue
    $SLURM_JOB_ID`` and every process exits ``128 + signal``. Outside a SLURM job (no
    ``SLURM_JOB_ID``) or without a ``requeue_signal`` the signal is left alone.
    """
    number = node_settings(plan.trainers).signal_number()
    job = os.environ.get("SLURM_JOB_ID")
    if number is None or not job:
        yield
        return
    with also_stop_on(number):
        try:
            yield
        except TrainingInterrupted as exc:
            if exc.signal_number != number:
                raise
            if is_main_rank():
                cluster.requeue_job(job)
            message = f"{exc}; SLURM job {job} was requeued (scontrol requeue) and will resume"
            raise TrainingInterrupted(message, number) from None


def newest_checkpoints(trainers: Sequence[TrainerPlan]) -> Callable[[], list[Path]]:
    """What lists the newest checkpoint of each trainer (in the folder where rank 0 saves)."""
    places = []
    for trainer in trainers:
        checkpoint = trainer.checkpoint or CheckpointSettings()
        folder = checkpoint.checkpoint_root or trainer.model_dir
        places.append((str(folder), checkpoint.checkpoint_name))

    def newest() -> list[Path]:
        found = (find_latest(folder, name) for folder, name in places)
        return [path for path in found if path is not None]

    return newest
