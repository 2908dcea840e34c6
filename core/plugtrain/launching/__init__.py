"""Launching: the processes ``plugtrain fit`` starts, and starting them.

Importing ``plugtrain.launching`` is torch-free and gives what a backend needs to know about
the launched processes (:mod:`.processes`: the node keys of a backend schema, this process's
place among them, leaving a worker cleanly). The room also holds :mod:`.cluster` (a process
started by a cluster scheduler: SLURM's job steps), :mod:`.elastic` (torchrun's elastic
launcher and what its failures mean) and :mod:`.run_file` (how many processes a run file's
trainers ask for, and launching them); those two import torch when they launch, and are imported
only by the command that runs a file.
"""

from __future__ import annotations

from plugtrain.launching.processes import (
    CLUSTER_ENVIRONMENTS,
    REQUEUE_SIGNALS,
    LaunchedProcess,
    NodeSettings,
    exit_after_atexit_handlers,
    exit_worker_when_done,
    is_main_rank,
    launched_process,
    node_args,
    node_problems,
)

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
