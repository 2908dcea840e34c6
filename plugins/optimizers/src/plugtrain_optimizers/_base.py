"""What every plugtrain optimizer shares: argument checking, eager state, runs, scratch buffers."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import attrs
import torch
from torch.utils._foreach_utils import _group_tensors_by_device_and_dtype

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.schema import (
    bind_arguments,
    check_arguments,
    constructor_signature,
    validated_arguments,
)
from plugtrain_optimizers import _native
from plugtrain_optimizers._auto_flat import flatten_by_default
from plugtrain_optimizers._blocks import FlatLayout, split_blocks
from plugtrain_optimizers._ops import FOREACH, PER_TENSOR, ListOps
from plugtrain_optimizers._sharded import has_sharded_params, on_local_shards
from plugtrain_optimizers._threads import StepTuner, tuning_threads

__all__ = ["PlugtrainOptimizer", "as_float", "step_values"]

_FUSED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def as_float(value: float | torch.Tensor) -> float:
    """A hyperparameter as a Python float (schedulers may store 0-dim tensors in groups)."""
    return float(value)


def step_values(steps: Sequence[torch.Tensor]) -> list[float]:
    """The values of 0-dim step counters (one stacked read instead of one read per tensor)."""
    if len(steps) == 1:
        return [float(steps[0])]
    return torch.stack(list(steps)).tolist()  # type: ignore[no-any-return]


class PlugtrainOptimizer(torch.optim.Optimizer):
    """Base of the plugtrain optimizers.

    Subclasses set ``schema`` (their attrs argument schema) and ``name``, implement
    :meth:`init_state` (state is created at construction, so ``state_dict()`` is complete before
    the first step) and :meth:`update_group` (one step of one param group, given the parameters
    that have gradients). :meth:`runs` hands the update lists to either back end of
    :mod:`plugtrain_optimizers._ops`; :meth:`scratch` gives reusable work buffers so that a step
    allocates nothing parameter-sized.
    """

    schema: ClassVar[type]
    name: ClassVar[str]
    flat_by_default: ClassVar[bool] = False
    """Whether ``flat=None`` may flatten a group (:mod:`~plugtrain_optimizers._auto_flat`): for
    updates of many operations, where one kernel per operation saves more than copying in the
    gradients backward allocated costs; not for torch's fused kernels, already one call."""
    elementwise: ClassVar[bool] = True
    """Whether every element of the update depends on the same element of the parameter, its
    gradient and its state only; then sharded (DTensor) parameters step on their local shards
    (:mod:`~plugtrain_optimizers._sharded`). False for updates that need whole tensors (a
    norm per tensor, a matrix's rows and columns): such an optimizer refuses DTensors."""
    tune_threads: ClassVar[bool] = True
    """Whether a CPU step's thread count is chosen by measured step times
    (:class:`~plugtrain_optimizers._threads.StepTuner`); False for matrix products, which every
    thread helps."""
    native_kernels: ClassVar[bool] = False
    """Whether float32 CPU steps may run the C kernels (:mod:`~plugtrain_optimizers._native`),
    which are then built (or found in the cache) when the optimizer is made."""
    kernels_match_torch_path: ClassVar[bool] = False
    """Whether the C kernels give the torch-operation path's numbers to the bit (elementwise
    updates without a square root or a sum). Only then may the step tuner move steps to the
    torch path when it is faster: a choice made by timing must never change a run's numbers."""

    __signature__: ClassVar[inspect.Signature]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "schema" in cls.__dict__:
            cls.__signature__ = constructor_signature(cls.schema, ("params",))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        arguments = bind_arguments(type(self).__signature__, args, kwargs)
        if "params" not in arguments:
            message = f"{self.name} needs the parameters to optimize as its first argument"
            raise TypeError(message)
        params = arguments.pop("params")
        defaults = self.prepare_defaults(
            validated_arguments(self.schema, arguments, owner=self.name)
        )
        self._scratch_views: dict[int, dict[torch.Tensor, torch.Tensor]] | None = None
        self._layouts: list[FlatLayout | None] = []
        self._block_arenas: dict[tuple[int, torch.device, torch.dtype], torch.Tensor] = {}
        # (slot, ids of a block's tensors) -> (those tensors, their scratch views)
        self._block_views: dict[tuple[int, ...], tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self._on_cpu = False  # intra-op threads only matter for parameters on the CPU
        self._tuner = (
            StepTuner(torch_path=self.kernels_match_torch_path) if tuning_threads() else None
        )
        self._native_plans: dict[int, Any] = {}  # per group: a subclass's kernel plan, if any
        super().__init__(params, defaults)
        if self.native_kernels and self._on_cpu:
            _native.load()  # before the first step, which may be timed or run by many ranks

    # -- groups and state -----------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (checking its own hyperparameters) and create its parameters' state."""
        param_group = self.prepare_group(dict(param_group))
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        self._check_group(group)
        for p in group["params"]:
            self.init_state(p, self.state[p], group)
        self._scratch_views = None
        self._block_views = {}
        layout = None
        flat = group.get("flat")
        dense = [p for p in group["params"] if p.requires_grad and not p.is_sparse]
        if flat is None:  # the default: flat where nothing observable changes
            if self.flat_by_default and flatten_by_default(dense):
                layout = FlatLayout(dense, missing_grads_as_zero=False)
        elif flat and dense:
            layout = FlatLayout(dense)
        if layout is not None:
            layout.flatten_state(self.state)
        self._layouts.append(layout)
        self._on_cpu = self._on_cpu or any(p.device.type == "cpu" for p in group["params"])

    def prepare_defaults(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """Turn checked constructor arguments into group defaults (default: unchanged)."""
        return defaults

    def prepare_group(self, group: dict[str, Any]) -> dict[str, Any]:
        """Adjust a group before torch fills in defaults (default: unchanged)."""
        return group

    def _check_group(self, group: dict[str, Any]) -> None:
        names = [f.name for f in attrs.fields(self.schema)]
        # 0-dim tensors written by schedulers are not config values; only plain values are checked.
        given = {
            k: group[k] for k in names if k in group and not isinstance(group[k], torch.Tensor)
        }
        problems = [(k, m) for k, m in check_arguments(self.schema, given) if k in given or not k]
        if problems:
            owner = f"{self.name} param group {len(self.param_groups) - 1}"
            raise ConfigError([ConfigIssue(f"{owner}.{k}" if k else owner, m) for k, m in problems])

    def init_state(self, param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the optimizer state of ``param`` (default: none)."""

    @staticmethod
    def new_step() -> torch.Tensor:
        """A step counter: a float32 0-dim tensor, as torch keeps it (never cast on load)."""
        return torch.zeros((), dtype=torch.float32)

    # -- stepping --------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Perform one optimization step; ``closure`` re-evaluates the loss if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for layout in self._layouts:
            if layout is not None:
                layout.repair_grads()
        if has_sharded_params(self):
            if not self.elementwise:
                message = (
                    f"{self.name} cannot step sharded (DTensor) parameters: its update needs "
                    "whole tensors; use data_parallel: ddp, or an element-wise optimizer"
                )
                raise RuntimeError(message)
            with on_local_shards(self):
                self._step_groups()
            return loss
        self._step_groups()
        return loss

    def _step_groups(self) -> None:
        if self._tuner is None or not (self.tune_threads and self._on_cpu):
            self._step_each_group()
            return
        with self._tuner.step():
            self._step_each_group()

    def _step_each_group(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if any(g.is_sparse for g in grads):  # type: ignore[union-attr]
                message = f"{self.name} does not support sparse gradients"
                raise RuntimeError(message)
            self.update_group(group, params, grads)  # type: ignore[arg-type]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients (a flat group's in one kernel: :meth:`FlatLayout.zero_grad`)."""
        if not any(self._layouts):
            super().zero_grad(set_to_none)
            return
        for group, layout in zip(self.param_groups, self._layouts, strict=True):
            if layout is not None:
                layout.zero_grad(set_to_none)
            for p in group["params"]:
                if p.grad is None or (layout is not None and id(p) in layout.grad_views):
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a saved state (from a flat or unflattened optimizer alike)."""
        super().load_state_dict(state_dict)
        for layout in self._layouts:
            if layout is not None:
                layout.flatten_state(self.state)
        self._block_views = {}

    def update_group(
        self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> None:
        """Apply one update to ``params`` of ``group`` (all have gradients)."""
        raise NotImplementedError

    def use_foreach(self, group: dict[str, Any]) -> bool:
        """Whether ``group`` takes the multi-tensor path (default: yes unless switched off)."""
        foreach = group.get("foreach")
        return True if foreach is None else bool(foreach)

    def can_fuse(self, group: dict[str, Any], params: Sequence[torch.Tensor]) -> bool:
        """Whether ``group`` may use one of torch's fused kernels for ``params``.

        Only on the multi-tensor path, for the floating dtypes and devices the kernels support.
        """
        return self.use_foreach(group) and all(
            p.dtype in _FUSED_DTYPES and p.device.type in ("cpu", "cuda", "mps") for p in params
        )

    def runs(
        self, group: dict[str, Any], lists: Sequence[Sequence[torch.Tensor]]
    ) -> Iterator[tuple[ListOps, list[list[torch.Tensor]], list[int]]]:
        """Split parallel lists into the pieces one update call handles, with their back end.

        Multi-tensor: one piece per (device, dtype) of the first list. Per-tensor: one piece per
        tensor. Each piece comes with the indices of its elements in ``lists``.
        """
        if self.use_foreach(group):
            grouped = _group_tensors_by_device_and_dtype(
                [list(t) for t in lists],  # type: ignore[arg-type]
                with_indices=True,
            )
            for run, indices in grouped.values():
                yield FOREACH, run, indices  # type: ignore[misc]
        else:
            for i in range(len(lists[0])):
                yield PER_TENSOR, [[lst[i]] for lst in lists], [i]

    def layout(self, group: dict[str, Any]) -> FlatLayout | None:
        """The flat layout of ``group`` (``None`` unless ``flat`` is true or chose it)."""
        for candidate, layout in zip(self.param_groups, self._layouts, strict=True):
            if candidate is group:
                return layout
        return None

    def flat_lists(
        self, group: dict[str, Any], lists: Sequence[Sequence[torch.Tensor]]
    ) -> list[list[torch.Tensor]] | None:
        """``lists`` as one buffer each (``[[buffer]]``) if all are views covering one."""
        layout = self.layout(group)
        if layout is None:
            return None
        bases = [layout.base_of(lst) for lst in lists]
        if any(b is None for b in bases):
            return None
        return [[b] for b in bases]  # type: ignore[list-item]

    def blocks(
        self,
        group: dict[str, Any],
        tensors: Sequence[Sequence[torch.Tensor]],
        scalars: Sequence[Sequence[float]] = (),
        *,
        split: bool = True,
        flat: bool = True,
    ) -> Iterator[tuple[ListOps, list[list[torch.Tensor]], list[list[float]]]]:
        """Pieces of an elementwise update over parallel ``tensors`` with per-tensor ``scalars``.

        Multi-tensor path: per (device, dtype), the group's flat buffers when ``tensors`` cover
        them and every scalar list is uniform, then (with ``split``) cut into cache blocks
        (:func:`~plugtrain_optimizers._blocks.split_blocks`). Per-tensor path: one tensor at a
        time. Within a piece, :meth:`block_scratch` gives work buffers. ``flat=False`` keeps
        whole tensors whole (for per-tensor reductions).
        """
        if not self.use_foreach(group):
            for i in range(len(tensors[0])):
                yield PER_TENSOR, [[t[i]] for t in tensors], [[s[i]] for s in scalars]
            return
        grouped = _group_tensors_by_device_and_dtype(
            [list(t) for t in tensors],  # type: ignore[arg-type]
            with_indices=True,
        )
        for run, indices in grouped.values():
            run_scalars = [[s[i] for i in indices] for s in scalars]
            bases = self.flat_lists(group, run) if flat else None  # type: ignore[arg-type]
            pieces = run
            if bases is not None and all(min(s) == max(s) for s in run_scalars if s):
                pieces, run_scalars = bases, [s[:1] for s in run_scalars]  # type: ignore[assignment]
            if not split:
                yield FOREACH, pieces, run_scalars  # type: ignore[misc]
                continue
            for block, block_scalars in split_blocks(pieces, run_scalars):  # type: ignore[arg-type]
                yield FOREACH, block, block_scalars

    def run_native(
        self,
        group: dict[str, Any],
        kernel: str,
        lists: Sequence[Sequence[torch.Tensor]],
        scalars: Sequence[float | Sequence[float]],
    ) -> bool:
        """Run one-pass kernel ``kernel`` (:mod:`~plugtrain_optimizers._native`) if it can.

        ``lists`` are the kernel's arrays, parallel lists of tensors; each of ``scalars`` is a
        float or a list of one float per tensor. On the multi-tensor path, where every tensor is
        float32 on the CPU and contiguous and the kernels are built, the update runs over a flat
        group's buffers (when the per-tensor scalars agree) or tensor by tensor; the parameters
        (the first list) count as modified in place for autograd. Returns whether it ran; if
        not, nothing was touched and the caller takes the multi-tensor path.
        """
        if not self.use_foreach(group):
            return False
        kernels = _native.load()
        if kernels is None:
            return False
        per_tensor = [s for s in scalars if not isinstance(s, int | float)]
        flat = self.flat_lists(group, lists)
        rows: list[tuple[list[torch.Tensor], list[float]]] = []
        if flat is not None and all(min(s) == max(s) for s in per_tensor):
            values = [s if isinstance(s, int | float) else s[0] for s in scalars]
            rows.append(([b[0] for b in flat], [float(v) for v in values]))
        else:
            for i in range(len(lists[0])):
                values = [s if isinstance(s, int | float) else s[i] for s in scalars]
                rows.append(([lst[i] for lst in lists], [float(v) for v in values]))
        if not all(_native.usable(tensors) for tensors, _ in rows):
            return False
        for tensors, values in rows:
            _native.op(kernel)(*tensors, *values)
        torch.autograd.graph.increment_version([tensors[0] for tensors, _ in rows])
        return True

    def block_scratch(self, like: list[torch.Tensor], slot: int = 0) -> list[torch.Tensor]:
        """Work buffers shaped like the tensors of one piece from :meth:`blocks` (slot ``slot``).

        Views of one buffer per (slot, device, dtype), as large as the largest piece so far;
        being reused for every block, it stays in cache. Never saved.
        """
        key = (slot, *map(id, like)) if len(like) > 1 else None
        if key is not None:
            cached = self._block_views.get(key)
            if cached is not None and all(a is b for a, b in zip(cached[0], like, strict=True)):
                return cached[1]
        first = like[0]
        arena = self.work_buffer(sum(t.numel() for t in like), first.device, first.dtype, slot)
        views, offset = [], 0
        for t in like:
            views.append(arena[offset : offset + t.numel()].view(t.shape))
            offset += t.numel()
        if key is not None:
            if len(self._block_views) > 4096:
                self._block_views = {}
            self._block_views[key] = (list(like), views)
        return views

    def step_all(self, group: dict[str, Any], steps: list[torch.Tensor]) -> list[float]:
        """Add one to each step counter (one kernel for a flat group's); return the new values."""
        flat = self.flat_lists(group, [steps])
        if flat is not None:
            base = flat[0][0]
            base.add_(1.0)
            return base.tolist()  # type: ignore[no-any-return]
        return self.advance(FOREACH if self.use_foreach(group) else PER_TENSOR, steps)

    def fused_lists(
        self, group: dict[str, Any], lists: Sequence[Sequence[torch.Tensor]]
    ) -> Iterator[list[list[torch.Tensor]]]:
        """Per (device, dtype): the lists for a fused kernel (a flat group's buffers if covered)."""
        for run in self.foreach_groups(lists):
            yield self.flat_lists(group, run) or run

    def fused_runs(
        self, group: dict[str, Any], lists: Sequence[Sequence[torch.Tensor]], ts: Sequence[float]
    ) -> Iterator[tuple[list[list[torch.Tensor]], list[float], list[int]]]:
        """Per (device, dtype): the lists for one of torch's fused kernels, step values, indices.

        A flat group whose step values agree is one call over its buffers; the last list (the
        step counters) then holds the first counter only.
        """
        grouped = _group_tensors_by_device_and_dtype(
            [list(t) for t in lists],  # type: ignore[arg-type]
            with_indices=True,
        )
        for run, indices in grouped.values():
            values = [ts[i] for i in indices]
            flat = self.flat_lists(group, run[:-1])  # type: ignore[arg-type]
            if flat is not None and min(values) == max(values):
                yield [*flat, [run[-1][0]]], values[:1], indices  # type: ignore[list-item]
            else:
                yield run, values, indices  # type: ignore[misc]

    def work_buffer(
        self, numel: int, device: torch.device, dtype: torch.dtype, slot: int = 0
    ) -> torch.Tensor:
        """The first ``numel`` elements of block scratch ``slot`` (grown when too small)."""
        arena_key = (slot, device, dtype)
        arena = self._block_arenas.get(arena_key)
        if arena is None or arena.numel() < numel:
            arena = torch.empty(numel, device=device, dtype=dtype)
            self._block_arenas[arena_key] = arena
            self._block_views = {}
        return arena[:numel]

    @staticmethod
    def foreach_groups(
        tensorlists: Sequence[Sequence[torch.Tensor]],
    ) -> Iterable[list[list[torch.Tensor]]]:
        """Split parallel tensor lists into runs that share device and dtype."""
        grouped = _group_tensors_by_device_and_dtype([list(t) for t in tensorlists])  # type: ignore[arg-type]
        for lists, _indices in grouped.values():
            yield lists  # type: ignore[misc]

    @staticmethod
    def split_by(keys: Sequence[Hashable]) -> list[tuple[Hashable, list[int] | None]]:
        """Positions sharing a key; ``None`` positions mean "all" (the common single-key case)."""
        first = keys[0]
        if all(k == first for k in keys):
            return [(first, None)]
        positions: dict[Hashable, list[int]] = {}
        for i, k in enumerate(keys):
            positions.setdefault(k, []).append(i)
        return list(positions.items())

    @staticmethod
    def take(lists: Sequence[Sequence[Any]], positions: list[int] | None) -> list[list[Any]]:
        """The elements at ``positions`` of each list (all of them for ``None``)."""
        if positions is None:
            return [list(lst) for lst in lists]
        return [[lst[i] for i in positions] for lst in lists]

    @staticmethod
    def advance(ops: ListOps, steps: list[torch.Tensor]) -> list[float]:
        """Add one to each step counter; return the new values."""
        ops.add_scalar_(steps, 1.0)
        return step_values(steps)

    def scratch(self, params: Sequence[torch.Tensor], slot: int = 0) -> list[torch.Tensor]:
        """Work buffers shaped like ``params`` (slot ``slot``), reused at every step.

        One flat buffer per (slot, device, dtype), as large as the largest group, is created on
        first use; each parameter gets a fixed view of it. Groups are updated one after the
        other, so they can share it. Scratch is not optimizer state: it is never saved.
        """
        if self._scratch_views is None:
            self._scratch_views = {}
        views = self._scratch_views.get(slot)
        if views is None:
            views = self._scratch_views[slot] = self._make_scratch()
        return [views[p] for p in params]

    def _make_scratch(self) -> dict[torch.Tensor, torch.Tensor]:
        placement: dict[torch.Tensor, tuple[tuple[torch.device, torch.dtype], int]] = {}
        sizes: dict[tuple[torch.device, torch.dtype], int] = {}
        for group in self.param_groups:
            offsets: dict[tuple[torch.device, torch.dtype], int] = {}
            for p in group["params"]:
                key = (p.device, p.dtype)
                start = offsets.get(key, 0)
                placement[p] = (key, start)
                offsets[key] = start + p.numel()
            for key, size in offsets.items():
                sizes[key] = max(sizes.get(key, 0), size)
        arenas = {key: torch.empty(n, device=key[0], dtype=key[1]) for key, n in sizes.items()}
        return {
            p: arenas[key][start : start + p.numel()].view(p.shape)
            for p, (key, start) in placement.items()
        }

    def effective_grads(
        self,
        ops: ListOps,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        *,
        weight_decay: float,
        maximize: bool = False,
        slot: int = 0,
    ) -> list[torch.Tensor]:
        """``±g + weight_decay * p`` in block scratch ``slot`` (``grads`` when nothing to add).

        The gradients are never modified: they belong to the caller.
        """
        if weight_decay == 0 and not maximize:
            return grads
        out = self.block_scratch(params, slot)
        ops.copy_(out, grads)
        if maximize:
            ops.mul_(out, -1.0)
        if weight_decay != 0:
            ops.add_(out, params, alpha=weight_decay)
        return out
