"""Cache blocks for elementwise updates, and the flat (one buffer per group) layout.

An elementwise update is a sequence of in-place list operations. Run over whole parameters,
each operation streams every tensor through memory once; run over cache-sized blocks (at most
:data:`BLOCK_ELEMENTS` elements of each list at a time), the later operations of the sequence
find the block still in cache, so the step moves little more than the bytes it must read and
write. Large contiguous tensors are cut into flat slices; small ones are grouped.

:class:`FlatLayout` keeps a param group's parameters, gradients and parameter-sized state as
views of one contiguous buffer per (device, dtype): an update over the whole group is then one
list of one tensor per buffer, i.e. one kernel per operation instead of one per parameter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["BLOCK_ELEMENTS", "FlatLayout", "block_elements", "consecutive", "split_blocks"]

BLOCK_ELEMENTS = 1 << 19
"""Elements of each list per block (2 MiB of float32: a few lists fit the last-level cache)."""


def block_elements() -> int:
    """The block size in force: :data:`BLOCK_ELEMENTS`, read at each call (tests shrink it)."""
    return BLOCK_ELEMENTS


Lists = list[list[torch.Tensor]]
ScalarLists = list[list[float]]


def split_blocks(
    lists: Sequence[Sequence[torch.Tensor]],
    scalars: Sequence[Sequence[float]],
    limit: int | None = None,
) -> Iterator[tuple[Lists, ScalarLists]]:
    """Cut parallel tensor lists (and their per-tensor scalars) into blocks of about ``limit``.

    A tensor larger than ``limit`` whose counterparts in every list are contiguous is cut into
    flat slices (each carrying the tensor's scalars); smaller tensors are grouped until a block
    holds ``limit`` elements (default :func:`block_elements`). The blocks cover every element
    exactly once.
    """
    if limit is None:
        limit = block_elements()
    n_lists, n_scalars = len(lists), len(scalars)
    block: Lists = [[] for _ in range(n_lists)]
    block_scalars: ScalarLists = [[] for _ in range(n_scalars)]
    size = 0
    for i, first in enumerate(lists[0]):
        numel = first.numel()
        row = [lst[i] for lst in lists]
        values = [s[i] for s in scalars]
        if numel > limit:
            if size:  # what was gathered so far, then this tensor alone
                yield block, block_scalars
                block, block_scalars = [[] for _ in range(n_lists)], [[] for _ in range(n_scalars)]
                size = 0
            if not all(t.is_contiguous() for t in row):
                yield [[t] for t in row], [[v] for v in values]
                continue
            flat = [t.view(-1) for t in row]
            for start in range(0, numel, limit):
                stop = min(start + limit, numel)
                yield [[t[start:stop]] for t in flat], [[v] for v in values]
            continue
        for lst, t in zip(block, row, strict=True):
            lst.append(t)
        for lst, v in zip(block_scalars, values, strict=True):
            lst.append(v)
        size += numel
        if size >= limit:
            yield block, block_scalars
            block, block_scalars = [[] for _ in range(n_lists)], [[] for _ in range(n_scalars)]
            size = 0
    if size or block[0]:
        yield block, block_scalars


class FlatLayout:
    """One contiguous buffer per (device, dtype) for a group's parameters, gradients and state.

    Built once, when the optimizer is constructed: each parameter's data becomes a view of the
    parameter buffer and its ``.grad`` a view of the gradient buffer (zero until backward writes
    it; backward accumulates into an existing ``.grad`` in place). Parameter-sized state tensors
    and 0-dim step counters become views of one buffer per state key. ``state_dict()`` still
    holds one tensor per parameter and state key, so checkpoints load both ways.

    With ``missing_grads_as_zero=False`` (the layout ``flat=None`` picks) gradients keep
    torch's semantics: a ``.grad`` that is ``None`` stays ``None`` (its parameter is not
    stepped), ``zero_grad(set_to_none=True)`` sets them to ``None``, and a gradient that
    backward allocated is copied into the buffer at the next step.

    :param params: the group's parameters (dense, all requiring gradients).
    :param missing_grads_as_zero: give every parameter a zero ``.grad`` view from the start, so
        that backward writes straight into the buffer (``flat=True``).
    """

    def __init__(
        self, params: Sequence[torch.Tensor], *, missing_grads_as_zero: bool = True
    ) -> None:
        self.missing_grads_as_zero = missing_grads_as_zero
        self.buckets: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in params:
            self.buckets.setdefault((p.device, p.dtype), []).append(p)
        self.param_bases: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self.grad_views: dict[int, torch.Tensor] = {}
        # (id first, id last, n) -> (first, last, base): holding first and last keeps their ids
        self.bases: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.state_keys: list[tuple[int, int, int]] = []
        for key, bucket in self.buckets.items():
            total = sum(p.numel() for p in bucket)
            data = torch.empty(total, device=key[0], dtype=key[1])
            grads = torch.zeros(total, device=key[0], dtype=key[1])
            offset = 0
            for p in bucket:
                n = p.numel()
                data[offset : offset + n].view(p.shape).copy_(p.detach())
                p.data = data[offset : offset + n].view(p.shape)
                view = grads[offset : offset + n].view(p.shape)
                if p.grad is not None:
                    view.copy_(p.grad)
                if p.grad is not None or missing_grads_as_zero:
                    p.grad = view
                self.grad_views[id(p)] = view
                offset += n
            self.param_bases[key] = data
            self._register(bucket, data)
            self._register([self.grad_views[id(p)] for p in bucket], grads)

    def _register(
        self, tensors: Sequence[torch.Tensor], base: torch.Tensor
    ) -> tuple[int, int, int]:
        key = _key(tensors)
        self.bases[key] = (tensors[0], tensors[-1], base)
        return key

    def flatten_state(self, state: Any) -> None:
        """Move each state key's tensors of a bucket into one buffer (after init or load).

        Tensors keep their own shapes (Adafactor's row and column statistics too); a key whose
        tensors differ in dtype or device is left as it is.
        """
        for old in self.state_keys:
            self.bases.pop(old, None)
        self.state_keys = []
        for bucket in self.buckets.values():
            keys = set.intersection(*(set(state[p]) for p in bucket))
            for key in sorted(keys):
                values = [state[p][key] for p in bucket]
                if not all(isinstance(v, torch.Tensor) for v in values):
                    continue
                first = values[0]
                if any(v.dtype != first.dtype or v.device != first.device for v in values):
                    continue
                if all(v.dim() == 0 for v in values):
                    base = torch.stack(values)
                    views = list(base.unbind())
                else:
                    base = torch.cat([v.reshape(-1) for v in values])
                    views, offset = [], 0
                    for v in values:
                        views.append(base[offset : offset + v.numel()].view(v.shape))
                        offset += v.numel()
                for p, view in zip(bucket, views, strict=True):
                    state[p][key] = view
                self.state_keys.append(self._register(views, base))

    def repair_grads(self) -> None:
        """Point every ``.grad`` back at its view, copying a gradient held elsewhere into it.

        A ``None`` gradient becomes a zero view, or stays ``None`` without
        ``missing_grads_as_zero``.
        """
        views: list[torch.Tensor] = []
        grads: list[torch.Tensor] = []
        for bucket in self.buckets.values():
            for p in bucket:
                view = self.grad_views[id(p)]
                grad = p.grad
                if grad is view:
                    continue
                if grad is None:
                    if not self.missing_grads_as_zero:
                        continue
                    view.zero_()
                else:
                    views.append(view)
                    grads.append(grad)
                p.grad = view
        if views:
            torch._foreach_copy_(views, grads)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero every gradient buffer in place (one kernel per buffer).

        Without ``missing_grads_as_zero`` and with ``set_to_none``, every ``.grad`` becomes
        ``None`` instead, as torch's optimizers do.
        """
        if not self.missing_grads_as_zero:
            for bucket in self.buckets.values():
                for p in bucket:
                    if set_to_none:
                        p.grad = None
                    elif p.grad is not None and p.grad is not self.grad_views[id(p)]:
                        p.grad.zero_()
            if set_to_none:
                return
        else:
            self.repair_grads()
        for bucket in self.buckets.values():
            grads = [self.grad_views[id(p)] for p in bucket]
            base = self.base_of(grads)
            if base is not None:
                base.zero_()

    def base_of(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """The buffer ``tensors`` are the views of, in order, or ``None``."""
        if not tensors:
            return None
        entry = self.bases.get(_key(tensors))
        if entry is None or entry[0] is not tensors[0] or entry[1] is not tensors[-1]:
            return None
        return entry[2]


def consecutive(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """``tensors`` as one ``(len, *shape)`` view if they lie back to back in one storage."""
    first = tensors[0]
    if not first.is_contiguous():
        return None
    numel, last = first.numel(), tensors[-1]
    step, start = numel * first.element_size(), first.data_ptr()
    if last.shape != first.shape or last.dtype != first.dtype:
        return None
    if first.untyped_storage().data_ptr() != last.untyped_storage().data_ptr():
        return None
    if [t.data_ptr() for t in tensors] != list(range(start, start + len(tensors) * step, step)):
        return None
    if not all(t.is_contiguous() and t.shape == first.shape for t in tensors):
        return None
    stride = (numel, *first.stride())
    return first.as_strided((len(tensors), *first.shape), stride, first.storage_offset())


def _key(tensors: Sequence[torch.Tensor]) -> tuple[int, int, int]:
    return id(tensors[0]), id(tensors[-1]), len(tensors)
