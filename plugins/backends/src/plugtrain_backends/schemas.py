"""Argument schemas of the backends, and the CSX ``ClusterConfig`` (all torch-free).

``plugtrain check`` validates a run file's ``backend:`` mapping against these classes, so every
rule here (types, ranges, ``host:port``, ``key=value``, existing directories) is reported with
its ``file:line`` before anything runs; the backends apply the same checks at construction.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.launching import node_args, node_problems
from plugtrain.schema import Problem, about, arg, check_arguments, validated_arguments

__all__ = ["DATA_PARALLEL", "CPUArgs", "CSXArgs", "ClusterConfig", "GPUArgs"]

DEFAULT_DIST_TIMEOUT = 1800.0
"""Seconds a collective waits for the other processes (torch's own default for gloo)."""

_MAX_PORT = 65535
MAX_DIST_TIMEOUT = 1e9
"""About 31 years: torch keeps the timeout in int64 milliseconds, Python's timedelta in days."""


DATA_PARALLEL = ("ddp", "fsdp2", "hsdp")
"""How a multi-process run spreads the model: DDP replicas, FSDP2 shards, or HSDP (replicas of
shard groups, ``dp_replicate`` x ``dp_shard``)."""


def parallel_problems(arguments: Mapping[str, Any], processes: int | None) -> Iterator[Problem]:
    """The rules of the ``data_parallel`` keys that a type and a range cannot express.

    :param processes: how many processes the run has, when the arguments say (``None``: known
        only at launch; ``plugtrain check --world-size N`` gives it).
    """
    mode = arguments.get("data_parallel", "ddp")
    shard, replicate = arguments.get("dp_shard"), arguments.get("dp_replicate", 1)
    if mode == "ddp":
        for key in ("dp_shard", "fsdp_modules"):
            if arguments.get(key):
                yield about(key, f"{key} applies to data_parallel: fsdp2 or hsdp, not ddp")
        if replicate != 1:
            yield about("dp_replicate", "dp_replicate applies to data_parallel: hsdp, not ddp")
        return
    if mode == "fsdp2" and replicate != 1:
        message = "dp_replicate applies to data_parallel: hsdp; fsdp2 shards over every process"
        yield about("dp_replicate", message)
        return
    if mode == "hsdp" and shard is None:
        yield about("dp_shard", "data_parallel: hsdp needs dp_shard (processes per shard group)")
        return
    if processes is None:
        return
    if shard is not None and shard * replicate != processes:
        message = (
            f"dp_shard x dp_replicate must equal the {processes} processes of the run, "
            f"got {shard} x {replicate} = {shard * replicate}"
        )
        yield about("dp_shard", message)
    elif shard is None and processes % replicate:
        message = f"dp_replicate={replicate} does not divide the {processes} processes of the run"
        yield about("dp_replicate", message)


_NODES = node_args()


def _own_after_artifact_dir(cls: type, fields: list[Any]) -> list[Any]:
    """``artifact_dir``, the backend's own arguments, then the shared rest (the documented order).

    attrs puts a base class's fields first; a backend's own arguments come right after
    ``artifact_dir`` in ``plugtrain show`` and the reference, and in the constructor signature.
    """
    inherited = [field for field in fields if field.inherited]
    own = [field for field in fields if not field.inherited]
    return [inherited[0], *own, *inherited[1:]]


@attrs.frozen
class _ProcessGroupArgs:
    """The arguments CPU and GPU share: where artifacts go, the timeout, the nodes, the plan.

    A subclass declares its own arguments with ``@attrs.frozen(field_transformer=
    _own_after_artifact_dir)``, which places them after ``artifact_dir``.
    """

    artifact_dir: str | None = arg(None, help="where the backend writes its artifacts")
    dist_timeout: float = arg(
        DEFAULT_DIST_TIMEOUT,
        help="seconds a collective waits for the other processes before the run fails",
        gt=0,
        le=MAX_DIST_TIMEOUT,
    )
    num_nodes: int = _NODES["num_nodes"]
    node_rank: int | None = _NODES["node_rank"]
    rdzv_endpoint: str | None = _NODES["rdzv_endpoint"]
    rdzv_id: str | None = _NODES["rdzv_id"]
    rdzv_timeout: float = _NODES["rdzv_timeout"]
    max_restarts: int = _NODES["max_restarts"]
    cluster_environment: str = _NODES["cluster_environment"]
    requeue_signal: str | None = _NODES["requeue_signal"]
    data_parallel: Literal["ddp", "fsdp2", "hsdp"] = arg(
        "ddp",
        help="ddp (replicas), fsdp2 (parameters, gradients and optimizer state sharded) or hsdp",
        choices=DATA_PARALLEL,
    )
    dp_shard: int | None = arg(
        None,
        help="processes one FSDP2 shard group spans (default: all of them / dp_replicate)",
        gt=0,
    )
    dp_replicate: int = arg(
        1, help="hsdp: replicas of the shard group (dp_shard x dp_replicate processes)", gt=0
    )
    reshard_after_forward: bool = arg(
        True, help="fsdp2/hsdp: free the gathered parameters after forward (less memory)"
    )
    fsdp_modules: list[str] = arg(
        [],
        help="fsdp2/hsdp: globs of submodule names that get their own fully_shard "
        "(e.g. blocks.*); empty: the model's own fsdp_modules, else the root only",
    )
    meta_device_init: bool = arg(
        True,
        help="fsdp2/hsdp: build a model with init_weights() on the meta device and fill only "
        "this process's shards; false: build it whole in every process first",
    )
    cluster_config: dict[str, Any] | None = arg(
        None,
        help="CSX only (a Model Zoo file's cluster configuration): accepted as it is and "
        "without effect here, which a run says once",
    )

    @staticmethod
    def plan_problems(arguments: Mapping[str, Any], world_size: int) -> Iterator[Problem]:
        """The ``data_parallel`` plan at ``world_size`` processes (``check --world-size``)."""
        return parallel_problems(arguments, world_size)


@attrs.frozen(field_transformer=_own_after_artifact_dir)
class CPUArgs(_ProcessGroupArgs):
    """Run on the host CPU: one process, or data parallel over gloo on several."""

    num_processes: int = arg(
        1,
        help="processes on this machine; above 1, `plugtrain fit` starts them with torchrun",
        gt=0,
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The node keys together and the ``data_parallel`` plan.

        ``host:port``, ``node_rank`` below ``num_nodes``; the plan against ``num_processes`` x
        ``num_nodes`` processes.
        """
        yield from node_problems(arguments)
        processes = int(arguments.get("num_processes", 1)) * int(arguments.get("num_nodes", 1))
        yield from parallel_problems(arguments, processes)


@attrs.frozen(field_transformer=_own_after_artifact_dir)
class GPUArgs(_ProcessGroupArgs):
    """Run on CUDA GPUs; data parallel with DDP (one process per GPU) when distributed."""

    enable_distributed: bool = arg(
        False, help="one process per visible GPU (`plugtrain fit` starts them with torchrun)"
    )
    main_process_id: int = arg(0, help="the rank that writes checkpoints and logs", ge=0)
    dist_backend: str = arg("nccl", help="torch.distributed backend (nccl or gloo)")
    init_method: str | None = arg(
        None, help="torch.distributed init method (None: env:// as set by torchrun)"
    )
    sync_batchnorm: bool = arg(False, help="convert BatchNorm layers to SyncBatchNorm")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The node keys together and the ``data_parallel`` plan.

        Several machines need ``enable_distributed``; the plan is checked for coherence only
        (the process count is known at launch).
        """
        yield from node_problems(arguments)
        if arguments["num_nodes"] > 1 and not arguments["enable_distributed"]:
            message = "num_nodes above 1 needs enable_distributed: true (one process per GPU)"
            yield about(("num_nodes", "enable_distributed"), message)
        yield from parallel_problems(arguments, None)


def _problems_of_format(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """The ClusterConfig rules that a type and a range cannot express."""
    address = arguments["mgmt_address"]
    if address is not None:
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) <= _MAX_PORT:
            message = f"mgmt_address must look like host:port (port 1-{_MAX_PORT}), got {address!r}"
            yield about("mgmt_address", message)
    for label in arguments["job_labels"]:
        key, equals, value = label.partition("=")
        if not equals or not key.strip() or not value.strip():
            yield about("job_labels", f"job_labels entries must look like key=value, got {label!r}")
    for name in ("mount_dirs", "python_paths"):
        for path in arguments[name]:
            if not os.path.isdir(path):
                yield about(name, f"{name}: directory {path!r} does not exist")


def _check_assignment(instance: ClusterConfig, attribute: attrs.Attribute, value: Any) -> Any:
    """Validate ``cluster_config.num_csx = 2`` as construction would."""
    arguments = attrs.asdict(instance, recurse=False)
    arguments[attribute.name] = value
    _raise_problems(type(instance), arguments)
    return value


def _raise_problems(cls: type, arguments: Mapping[str, Any]) -> None:
    problems = check_arguments(cls, arguments)
    if problems:
        issues = [
            ConfigIssue(f"ClusterConfig.{key}" if key else "ClusterConfig", message)
            for key, message in problems
        ]
        raise ConfigError(issues)


@attrs.define(init=False, on_setattr=_check_assignment)
class ClusterConfig:
    """Where and how a CSX job runs (cstorch's ``distributed.ClusterConfig``).

    Every field is checked at construction and on assignment
    (``backend.cluster_config.num_csx = 2``); an unknown field is an error. In a run file it is
    the ``cluster_config:`` mapping of a CSX backend, checked by ``plugtrain check``.
    """

    mgmt_address: str | None = arg(None, help="host:port of the cluster's management server")
    mgmt_namespace: str | None = arg(None, help="namespace of the cluster's management server")
    credentials_path: str | None = arg(None, help="TLS certificate of the management server")
    num_csx: int = arg(1, help="number of CS-X systems", gt=0)
    max_wgt_servers: int = arg(0, help="weight servers (0: chosen by the cluster)", ge=0)
    max_act_per_csx: int = arg(0, help="activation servers per CS-X (0: chosen)", ge=0)
    num_workers_per_csx: int = arg(1, help="input workers per CS-X", gt=0)
    cbcore_image: str | None = arg(None, help="the cbcore container image")
    job_labels: list[str] = arg([], help="labels of the job, each key=value")
    job_priority: Literal["p1", "p2", "p3"] | None = arg(None, help="p1, p2 or p3")
    job_time_sec: int | None = arg(None, help="time limit of the job in seconds", gt=0)
    mount_dirs: list[str] = arg([], help="directories mounted into the job; must exist")
    python_paths: list[str] = arg([], help="directories added to PYTHONPATH; must exist")
    automount: bool = arg(True, help="mount the directories of imported modules")
    mount_all: bool = arg(True, help="mount every directory on the python path")
    disable_mount_check: bool = arg(True, help="skip checking that mounts are reachable")
    disable_version_check: bool = arg(False, help="skip the software version check")
    workflow_id: str | None = arg(None, help="run the job in this workflow")
    notifications: list[Any] = arg([], help="where job notifications go")

    def __init__(self, **arguments: Any) -> None:
        complete = validated_arguments(type(self), arguments, owner="ClusterConfig")
        self.__attrs_init__(**complete)  # type: ignore[attr-defined]

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """``host:port``, ``key=value`` labels and directories that must exist."""
        return _problems_of_format(arguments)

    def validate(self) -> None:
        """Check every field again (lists changed in place are not seen on assignment)."""
        _raise_problems(type(self), attrs.asdict(self, recurse=False))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain mapping (copies of the lists)."""
        return {
            name: list(value) if isinstance(value, list) else value
            for name, value in attrs.asdict(self, recurse=False).items()
        }


# The keyword signature attrs generated, so that help() and IDEs show the real fields.
ClusterConfig.__init__.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    ClusterConfig.__attrs_init__  # type: ignore[attr-defined]
)


@attrs.frozen
class CSXArgs:
    """Run on a Cerebras CS-X cluster through the Cerebras software stack (cerebras.pytorch)."""

    artifact_dir: str | None = arg(None, help="where the backend writes its artifacts")
    compile_dir: str | None = arg(None, help="where compiled artifacts go on the cluster")
    compile_only: bool = arg(False, help="compile the model, do not train")
    validate_only: bool = arg(False, help="validate that the model compiles, do not compile")
    cluster_config: dict[str, Any] | None = arg(
        None, section=ClusterConfig, help="the cluster configuration (ClusterConfig fields)"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """``compile_only`` and ``validate_only`` exclude each other."""
        if arguments["compile_only"] and arguments["validate_only"]:
            message = "compile_only and validate_only are mutually exclusive; give at most one"
            yield about(("validate_only", "compile_only"), message)
