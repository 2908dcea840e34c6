"""FSDP2 and HSDP: the model's parameters sharded over a device mesh (``fully_shard``).

The mesh is built on the backend's own device type (``cpu`` for gloo, ``cuda`` for NCCL), so
a CPU run never touches a GPU even where one is visible. The submodules whose names match the
plan's globs (``fsdp_modules``, else the model's own ``fsdp_modules``) get their own
``fully_shard`` first, innermost first, then the root; each such unit gathers its parameters
for its forward and backward and frees them after (``reshard_after_forward``).
"""

from __future__ import annotations

import ctypes
import fnmatch
import logging
import os
import platform
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from plugtrain.errors import BackendError

__all__ = [
    "DeepReport",
    "FSDPPlan",
    "build_mesh",
    "deep_check",
    "mixed_precision",
    "pin_mmap_threshold",
    "shard_model",
    "sharded_units",
]

log = logging.getLogger("plugtrain")


class FSDPPlan:
    """What a backend's ``data_parallel`` keys say about sharding one model.

    :param mode: ``"fsdp2"`` or ``"hsdp"``.
    :param dp_shard: processes per shard group (``None``: all of them / ``dp_replicate``).
    :param dp_replicate: replicas of the shard group (HSDP).
    :param reshard_after_forward: free gathered parameters after each unit's forward.
    :param modules: globs of submodule names that get their own ``fully_shard``.
    """

    def __init__(
        self,
        mode: str,
        dp_shard: int | None,
        dp_replicate: int,
        reshard_after_forward: bool,
        modules: Sequence[str],
    ) -> None:
        self.mode = mode
        self.dp_shard = dp_shard
        self.dp_replicate = dp_replicate
        self.reshard_after_forward = reshard_after_forward
        self.modules = tuple(modules)

    @classmethod
    def of_backend(cls, backend: Any) -> FSDPPlan:
        """The plan in a CPU or GPU backend's arguments."""
        return cls(
            backend.data_parallel,
            backend.dp_shard,
            backend.dp_replicate,
            backend.reshard_after_forward,
            backend.fsdp_modules,
        )

    def mesh_shape(self, world_size: int) -> tuple[int, ...]:
        """``(dp_shard,)`` for FSDP2, ``(dp_replicate, dp_shard)`` for HSDP.

        :raises BackendError: when the shape does not cover ``world_size`` processes.
        """
        replicate = self.dp_replicate if self.mode == "hsdp" else 1
        shard = self.dp_shard if self.dp_shard is not None else world_size // replicate
        if shard * replicate != world_size:
            message = (
                f"data_parallel: {self.mode}: dp_shard x dp_replicate must equal the "
                f"{world_size} processes of the run, got {shard} x {replicate}"
            )
            raise BackendError(message)
        return (replicate, shard) if self.mode == "hsdp" else (shard,)


def build_mesh(device_type: str, shape: tuple[int, ...]) -> DeviceMesh:
    """The device mesh of the run, on ``device_type`` (``cpu`` or ``cuda``) explicitly."""
    names = ("dp_replicate", "dp_shard") if len(shape) == 2 else ("dp_shard",)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def own_mesh(model: nn.Module) -> DeviceMesh | None:
    """The device mesh of a model that applied ``fully_shard`` to itself, else ``None``."""
    if not isinstance(model, FSDPModule):
        return None
    for parameter in model.parameters():
        if isinstance(parameter, DTensor):
            return parameter.device_mesh
    return None


def mixed_precision(half: str | None) -> MixedPrecisionPolicy | None:
    """FSDP2's policy for ``precision``'s half type: parameters in it, reduction in float32."""
    if half is None:
        return None
    return MixedPrecisionPolicy(param_dtype=getattr(torch, half), reduce_dtype=torch.float32)


def sharded_units(model: nn.Module, globs: Sequence[str]) -> list[str]:
    """The submodule names (not the root) that get their own ``fully_shard``, in module order.

    Globs match names as parameter tag globs do (``*`` crosses dots); each glob selects its
    outermost matches only, so ``*.layers.*`` selects the blocks, not every module inside
    them. Another glob may select modules inside (``*.ffn``: nested units).
    """
    chosen: set[str] = set()
    names = [name for name, _ in model.named_modules() if name]
    for glob in globs:
        picked: list[str] = []
        for name in names:
            if fnmatch.fnmatchcase(name, glob) and not any(
                name.startswith(outer + ".") for outer in picked
            ):
                picked.append(name)
        chosen.update(picked)
    return [name for name in names if name in chosen]


def unmatched_globs(model: nn.Module, globs: Sequence[str]) -> list[str]:
    """The globs that match no submodule name of ``model``."""
    names = [name for name, _ in model.named_modules() if name]
    return [glob for glob in globs if not any(fnmatch.fnmatchcase(n, glob) for n in names)]


def model_plan(model: nn.Module, plan: FSDPPlan) -> tuple[str, ...]:
    """The globs in force: the plan's, else the model's own ``fsdp_modules``, else none."""
    if plan.modules:
        return plan.modules
    own = getattr(model, "fsdp_modules", ())
    return tuple(own() if callable(own) else own)


def shard_model(
    model: nn.Module, mesh: DeviceMesh, plan: FSDPPlan, policy: MixedPrecisionPolicy | None
) -> nn.Module:
    """Apply ``fully_shard`` to the plan's submodules (innermost first), then to the root.

    :raises BackendError: when a glob of the plan matches no submodule.
    """
    globs = model_plan(model, plan)
    missing = unmatched_globs(model, globs)
    if missing:
        message = (
            f"fsdp_modules: {', '.join(missing)} matches no submodule of {type(model).__name__}"
        )
        raise BackendError(message)
    options: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": plan.reshard_after_forward,
    }
    if policy is not None:
        options["mp_policy"] = policy
    modules = dict(model.named_modules())
    # Innermost first: fully_shard of a parent leaves a child's parameters to the child's unit.
    for name in sorted(sharded_units(model, globs), key=lambda n: n.count("."), reverse=True):
        fully_shard(modules[name], **options)
    fully_shard(model, **options)
    return model


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD = 1 << 20  # blocks of 1 MiB and more are mapped; activations stay on the heap


def pin_mmap_threshold() -> bool:
    """Keep glibc's mmap threshold fixed (1 MiB) in this process.

    glibc raises the threshold (up to 32 MiB) each time a mapped block is freed, so after the
    first step FSDP2's per-unit buffers below 32 MiB (all-gathered parameters, unsharded
    gradients, reduce-scatter inputs, freed every unit) come from the heap, where they
    fragment it and its pages are not given back: a 31.7 M GPT's peak RSS grew by 300-
    400 MiB over its first steps (bench/sharded.py). Fixed, those buffers are mapped and
    unmapped each time (which costs page faults: step time). 1 MiB, not glibc's default
    128 KiB: mapping every activation too cost more system time (8.9 s against 7.1 s over 8
    steps there) for 75 MiB less. Returns whether the setting was made (only on glibc).

    A threshold the environment sets with glibc's own tunables (``MALLOC_MMAP_THRESHOLD_``,
    or ``glibc.malloc.mmap_threshold`` in ``GLIBC_TUNABLES``) wins: then nothing is changed.
    That is also the way to trade the memory back for step time (a large fixed threshold).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in tunables:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def set_gradient_sync(model: nn.Module, synchronize: bool) -> None:
    """Whether the next backward reduce-scatters the gradients (the last micro-batch only)."""
    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(synchronize)


class DeepReport:
    """What :func:`deep_check` found: per-rank bytes, or problems with the plan.

    :param lines: the report, one line per fact.
    :param problems: ``(argument, message)`` pairs about the backend's arguments (an item of a
        list argument as ``name[index]``).
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.problems: list[tuple[str, str]] = []


def _bytes(tensors: Any) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if isinstance(t, DTensor) else t
        total += local.numel() * local.element_size()
    return total


def _optimizer_bytes(optimizer: Any) -> int:
    if optimizer is None:
        return 0
    return _bytes(
        v
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )


def deep_check(plan: FSDPPlan, make_model: Any, make_optimizer: Any, world_size: int) -> DeepReport:
    """Shard the model on a fake process group of ``world_size`` and count rank 0's bytes.

    The model and the optimizer state are built on the ``meta`` device (no memory, no data);
    the process group is torch's ``fake`` one (no other process). Rank 0 holds the largest
    shard of every tensor (FSDP2 cuts dim 0 in equal chunks, the last ones shorter).

    :param make_model: builds the model (called under ``torch.device("meta")``).
    :param make_optimizer: ``make_optimizer(model)``, or ``None`` without an optimizer.
    """
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    report = DeepReport()
    try:
        shape = plan.mesh_shape(world_size)
    except BackendError as exc:
        report.problems.append(("dp_shard", str(exc)))
        return report
    with torch.device("meta"):
        whole = make_model()
        replica_optimizer = make_optimizer(whole) if make_optimizer else None
    globs = model_plan(whole, plan)
    for glob in unmatched_globs(whole, globs):
        key = f"fsdp_modules[{plan.modules.index(glob)}]" if glob in plan.modules else ""
        report.problems.append((key, f"{glob!r} matches no submodule of the model"))
    if report.problems:
        return report
    replica = _bytes(whole.parameters())
    replica_grads = _bytes(p for p in whole.parameters() if p.requires_grad)
    replica_state = _optimizer_bytes(replica_optimizer)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        with torch.device("meta"):
            model = make_model()
        mesh = build_mesh("cpu", shape)
        shard_model(model, mesh, plan, None)
        with torch.device("meta"):
            optimizer = make_optimizer(model) if make_optimizer else None
        params = _bytes(model.parameters())
        grads = _bytes(p for p in model.parameters() if p.requires_grad)
        state = _optimizer_bytes(optimizer)
    finally:
        dist.destroy_process_group()
    units = sharded_units(whole, globs)
    names = (
        dict(zip(("dp_replicate", "dp_shard"), shape, strict=False))
        if len(shape) == 2
        else {"dp_shard": shape[0]}
    )
    mib = 2**20
    report.lines += [
        f"mesh {' x '.join(f'{k}={v}' for k, v in names.items())} over {world_size} processes; "
        f"{len(units) + 1} fully_shard units ({len(units)} from fsdp_modules + the root)",
        f"per rank: parameters {params / mib:.2f} MiB, gradients {grads / mib:.2f} MiB, "
        f"optimizer state {state / mib:.2f} MiB; total {(params + grads + state) / mib:.2f} MiB",
        f"ddp would hold: parameters {replica / mib:.2f} MiB, gradients {replica_grads / mib:.2f} "
        f"MiB, optimizer state {replica_state / mib:.2f} MiB; total "
        f"{(replica + replica_grads + replica_state) / mib:.2f} MiB",
    ]
    return report
