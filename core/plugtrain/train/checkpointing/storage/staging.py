"""Staging for background DCP saves: the state copied into CPU buffers kept between saves.

``dcp.async_save`` returns once the state is *staged*, copied somewhere training cannot
change it, and writes that copy in a thread. DCP's own stager deep-copies the state dict on
every save: it allocates fresh memory (whose first touch costs page faults), copies the
tensors one call each, and rebuilds every DTensor around its copy. :class:`CachedStager` does
that work once, on the first save, and on every later save of the same layout copies the
tensors into the same buffers in one fused ``torch._foreach_copy_``: the loop blocks for
about one memory copy of this process's shards.

The price is that the copy stays in memory between saves (this process's shards of the model
and optimizer state, in CPU memory, pinned when they live on a GPU). Every save holds that
copy anyway while it is written, so a run's peak memory does not grow. The buffers are
reused only after the previous write finished (``DCPCheckpointer.save`` waits for it first).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.tensor import DTensor

__all__ = ["CachedStager"]

Path = tuple[str, ...]


class CachedStager:
    """A DCP ``AsyncStager`` that copies the state into CPU buffers made on the first save.

    The buffers (and the DTensors around them) are made again when the state's layout changes:
    other keys, shapes, dtypes, devices or placements. Values that are not tensors are deep
    copies made at each save.
    """

    _synchronize_after_execute = False  # the copy is done when stage() returns

    def __init__(self) -> None:
        self._layout: list[tuple[Path, Any]] | None = None
        self._buffers: list[torch.Tensor] = []
        self._staged: dict[Path, torch.Tensor] = {}
        self.rebuilt = 0
        """How many times the buffers were made (1 for a run whose state keeps its layout)."""

    @property
    def should_synchronize_after_execute(self) -> bool:
        """``False``: :meth:`stage` returns a finished copy; there is nothing to wait for."""
        return self._synchronize_after_execute

    def stage(self, state_dict: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of ``state_dict`` that later training steps do not change."""
        leaves = list(_tensor_leaves(state_dict, ()))
        layout = [(path, _layout_of(tensor)) for path, tensor in leaves]
        if layout != self._layout:
            self._make_buffers(leaves)
            self._layout = layout
        sources = [_local(tensor) for _, tensor in leaves]
        with torch.no_grad():
            torch._foreach_copy_(self._buffers, sources, non_blocking=True)
        if any(source.is_cuda for source in sources):
            torch.cuda.synchronize()
        return _rebuilt(state_dict, (), self._staged)  # type: ignore[no-any-return]

    def _make_buffers(self, leaves: list[tuple[Path, torch.Tensor]]) -> None:
        self._buffers = []
        self._staged = {}
        with torch.no_grad():
            for path, tensor in leaves:
                local = _local(tensor)
                buffer = torch.empty(
                    local.shape, dtype=local.dtype, device="cpu", pin_memory=local.is_cuda
                )
                self._buffers.append(buffer)
                if isinstance(tensor, DTensor):
                    self._staged[path] = DTensor.from_local(
                        buffer,
                        tensor.device_mesh,
                        tensor.placements,
                        run_check=False,
                        shape=tensor.shape,
                        stride=tensor.stride(),
                    )
                else:
                    self._staged[path] = buffer
        self.rebuilt += 1

    def synchronize_staging(self) -> None:
        """Nothing to wait for (see :attr:`should_synchronize_after_execute`)."""

    def close(self) -> None:
        """Free the buffers."""
        self._layout = None
        self._buffers = []
        self._staged = {}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor.detach()


def _layout_of(tensor: torch.Tensor) -> Any:
    local = _local(tensor)
    spec = (tensor.device_mesh, tuple(tensor.placements)) if isinstance(tensor, DTensor) else None
    return (tuple(tensor.shape), tuple(local.shape), tensor.dtype, local.device, spec)


def _tensor_leaves(value: Any, path: Path) -> Any:
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _tensor_leaves(item, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _tensor_leaves(item, (*path, str(index)))


def _rebuilt(value: Any, path: Path, staged: Mapping[Path, torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return staged[path]
    if isinstance(value, Mapping):
        return {key: _rebuilt(item, (*path, str(key)), staged) for key, item in value.items()}
    if isinstance(value, list | tuple):
        items = [_rebuilt(item, (*path, str(i)), staged) for i, item in enumerate(value)]
        return type(value)(items) if isinstance(value, list) else tuple(items)
    return copy.deepcopy(value)
