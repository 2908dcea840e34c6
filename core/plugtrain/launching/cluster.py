"""Where a process stands when a cluster scheduler started it: SLURM's job steps (torch-free).

``srun plugtrain fit RUN.yaml`` starts one task per process; each task has ``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_JOB_NODELIST`` and ``SLURM_JOB_ID`` but none of
torchrun's variables. :func:`torchrun_variables` turns them into torchrun's (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``...), so the rest of plugtrain
(and torch's ``env://`` rendezvous) sees an ordinary launched process: the master address is the
first host of the node list, the port is derived from the job id (as Lightning does), unless
``MASTER_ADDR`` / ``MASTER_PORT`` are set already. A single task (an interactive allocation,
``srun --pty bash``) is not a distributed job.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from plugtrain.errors import BackendError

__all__ = [
    "expand_nodelist",
    "is_slurm_job_step",
    "is_torchrun_process",
    "requeue_job",
    "slurm_port",
    "tasks_per_node",
    "torchrun_variables",
]

log = logging.getLogger("plugtrain")

_INTERACTIVE_NAMES = ("bash", "interactive")
"""Job names of interactive shells (``srun --pty bash``), as Lightning's SLURM detection."""

_TOKEN = re.compile(r"([^,\[]*)(\[[^\]]*\])?([^,\[]*)")


def expand_nodelist(nodelist: str) -> list[str]:
    """The host names of SLURM's compressed node list, in order.

    ``node[01-03,07],gpu5`` is ``node01, node02, node03, node07, gpu5``; zero padding is kept,
    several bracket groups (``rack[1-2]-n[1-2]``) expand as a product.

    :raises BackendError: on a list that is not SLURM's format.
    """
    hosts: list[str] = []
    for part in _split_top_level(nodelist.strip()):
        hosts.extend(_expand_one(part, nodelist))
    if not hosts:
        message = f"SLURM_JOB_NODELIST={nodelist!r} names no host"
        raise BackendError(message)
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part for part in parts if part]


def _expand_one(part: str, whole: str) -> list[str]:
    bracket = part.find("[")
    if bracket < 0:
        return [part]
    close = part.find("]", bracket)
    if close < 0:
        message = f"SLURM_JOB_NODELIST={whole!r}: unclosed '[' in {part!r}"
        raise BackendError(message)
    prefix, ranges, rest = part[:bracket], part[bracket + 1 : close], part[close + 1 :]
    tails = _expand_one(rest, whole) if rest else [""]
    return [f"{prefix}{middle}{tail}" for middle in _ranges(ranges, whole) for tail in tails]


def _ranges(text: str, whole: str) -> list[str]:
    found = []
    for item in text.split(","):
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            message = f"SLURM_JOB_NODELIST={whole!r}: {item!r} is not a number or a range"
            raise BackendError(message)
        if not dash:
            found.append(low)
            continue
        width = len(low)
        found.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return found


def slurm_port(job_id: str) -> int:
    """The rendezvous port of a SLURM job: 15000 plus the job id's last four digits."""
    digits = "".join(c for c in job_id if c.isdigit())[-4:]
    return 15000 + int(digits or "0")


def is_torchrun_process(environ: Mapping[str, str]) -> bool:
    """Whether torchrun (or a compatible launcher) started this process."""
    return "RANK" in environ and "WORLD_SIZE" in environ


def is_slurm_job_step(environ: Mapping[str, str]) -> bool:
    """Whether ``srun`` started this process as one of several tasks of a job step."""
    if "SLURM_PROCID" not in environ or "SLURM_JOB_NODELIST" not in environ:
        return False
    if environ.get("SLURM_JOB_NAME") in _INTERACTIVE_NAMES:
        return False
    tasks = environ.get("SLURM_NTASKS", environ.get("SLURM_NPROCS", "1"))
    return tasks.isdigit() and int(tasks) > 1


def torchrun_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The torchrun variables for the task of a SLURM job step that ``environ`` describes.

    :raises BackendError: when a SLURM variable is missing or not an integer.
    """
    try:
        rank = int(environ["SLURM_PROCID"])
        world_size = int(environ.get("SLURM_NTASKS") or environ["SLURM_NPROCS"])
        local_rank = int(environ.get("SLURM_LOCALID", "0"))
        node_rank = int(environ.get("SLURM_NODEID", "0"))
    except (KeyError, ValueError) as exc:
        message = (
            "a SLURM job step needs integer SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and "
            f"SLURM_NODEID: {exc}"
        )
        raise BackendError(message) from None
    master = environ.get("MASTER_ADDR") or expand_nodelist(environ["SLURM_JOB_NODELIST"])[0]
    port = environ.get("MASTER_PORT") or str(slurm_port(environ.get("SLURM_JOB_ID", "0")))
    variables = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank),
        "MASTER_ADDR": master,
        "MASTER_PORT": port,
    }
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "")
    if per_node.isdigit():
        variables["LOCAL_WORLD_SIZE"] = per_node
    return variables


def tasks_per_node(environ: Mapping[str, str]) -> int | None:
    """Tasks of the job step on each machine (``None`` when SLURM does not say it simply)."""
    per_node = environ.get("SLURM_NTASKS_PER_NODE", "")
    if per_node.isdigit():
        return int(per_node)
    tasks, nodes = environ.get("SLURM_NTASKS", ""), environ.get("SLURM_NNODES", "")
    if tasks.isdigit() and nodes.isdigit() and int(nodes) > 0:
        return int(tasks) // int(nodes)
    return None


def requeue_job(job_id: str) -> None:
    """``scontrol requeue JOB_ID``: SLURM puts the job back in the queue (it starts again later).

    :raises BackendError: when ``scontrol`` is missing or fails.
    """
    scontrol = shutil.which("scontrol", path=os.environ.get("PATH"))
    if scontrol is None:
        message = f"cannot requeue SLURM job {job_id}: scontrol is not on PATH"
        raise BackendError(message)
    done = subprocess.run(
        [scontrol, "requeue", job_id], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"status {done.returncode}"
        message = f"`scontrol requeue {job_id}` failed: {why}"
        raise BackendError(message)
    log.info("requeued SLURM job %s (scontrol requeue)", job_id)
