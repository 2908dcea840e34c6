"""Filling a model built on the ``meta`` device, one shard at a time, with its own init values.

A model that declares ``init_weights()`` (which gives every parameter and buffer the value its
construction gives, drawing random numbers in the same order) is built on ``meta`` (no memory),
sharded, given empty local storage (``to_empty``) and then filled by :func:`materialise`: its
``init_weights()`` runs under :class:`ShardFiller`, which hands every torch call that touches a
sharded parameter the whole tensor instead (a scratch tensor of the global shape), and when
the call moves on to another parameter keeps this process's shard of the finished one. Every
process makes the same calls with the same seed, so each fills its shard with exactly the
values a model built whole would hold there, while holding one whole parameter at a time
rather than the whole model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from plugtrain.errors import BackendError

__all__ = ["ShardFiller", "built_on_meta", "can_build_on_meta", "materialise"]

_METADATA = frozenset(
    ("shape", "dtype", "device", "ndim", "requires_grad", "is_leaf", "layout", "is_meta")
)
_METADATA_METHODS = frozenset(("dim", "size", "numel", "element_size", "is_floating_point"))
"""Calls that read only a tensor's shape or type, answered by the sharded parameter."""
_FACTORIES = frozenset(("new_tensor", "new_empty", "new_zeros", "new_ones", "new_full"))
"""``x.new_*(...)``: a plain tensor of x's type on the CPU, where the scratch tensors are."""
_OVERWRITES = frozenset(
    (
        *("normal_", "uniform_", "fill_", "zero_", "copy_", "random_", "trunc_normal_"),
        *("constant_", "ones_", "zeros_", "eye_", "dirac_", "orthogonal_", "sparse_"),
        *("xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"),
    )
)
"""In-place fills (tensor methods and ``torch.nn.init`` functions) that write every element of
their first argument without reading it: a parameter filled before needs no gathering for them."""


def can_build_on_meta(model: nn.Module) -> bool:
    """Whether ``model`` declares ``init_weights()`` (plugtrain's meta-device contract)."""
    return callable(getattr(model, "init_weights", None))


def built_on_meta(model: nn.Module) -> bool:
    """Whether any parameter or buffer of ``model`` is on the ``meta`` device."""
    tensors = [*model.parameters(), *model.buffers()]
    return any(t.is_meta for t in tensors)


def _is_metadata(func: Callable[..., Any]) -> bool:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and owner is not None:
        return getattr(owner, "__name__", "") in _METADATA
    return getattr(func, "__name__", "") in _METADATA_METHODS


class ShardFiller(TorchFunctionMode):
    """Runs torch calls on sharded parameters against whole scratch tensors (see the module).

    A view of a parameter taken inside ``init_weights`` (``w.view(-1)``) is a view of its
    scratch tensor: it must be written before a call touches another parameter, which keeps
    the shard of the first (``torch.nn.init``'s functions all do so).

    :param parameters: the sharded parameters (DTensors) to fill.
    """

    def __init__(self, parameters: Iterable[DTensor]) -> None:
        super().__init__()
        self._sharded = {id(p): p for p in parameters}
        self._open: dict[int, torch.Tensor] = {}
        self._filled: set[int] = set()
        self.gathered = 0
        """How many parameters a later call touched again (each re-gathered from its shards)."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if _is_metadata(func):
            return func(*args, **kwargs)
        if getattr(func, "__name__", "") in _FACTORIES and args and isinstance(args[0], DTensor):
            receiver = torch.empty(0, dtype=args[0].dtype)  # the scratch tensors' device
            return func(receiver, *args[1:], **kwargs)
        touched: dict[int, DTensor] = {}

        def note(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and id(value) in self._sharded:
                touched[id(value)] = value
            return value

        tree_map(note, (args, kwargs))
        if not touched:
            return func(*args, **kwargs)
        for key in [k for k in self._open if k not in touched]:
            self._keep_shard(key)
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes tensor=
        overwritten = target if getattr(func, "__name__", "") in _OVERWRITES else None
        for key, parameter in touched.items():
            if key not in self._open:
                self._open[key] = self._whole(key, parameter, parameter is overwritten)

        def swap(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and id(value) in touched:
                return self._open[id(value)]
            return value

        args, kwargs = tree_map(swap, (args, kwargs))
        return func(*args, **kwargs)

    def _whole(self, key: int, parameter: DTensor, overwritten: bool) -> torch.Tensor:
        # On the CPU, whatever the mesh's device: a model built whole is built on the CPU (and
        # moved after), so its random draws come from the CPU generator; so must these.
        if key in self._filled and not overwritten:  # read again later: every process gathers
            self.gathered += 1
            return parameter.full_tensor().to("cpu", copy=True)
        dtype = parameter.to_local().dtype
        return torch.empty(parameter.shape, dtype=dtype, device="cpu")

    def _keep_shard(self, key: int) -> None:
        parameter, whole = self._sharded[key], self._open.pop(key)
        shard = distribute_tensor(
            whole, parameter.device_mesh, parameter.placements, src_data_rank=None
        ).to_local()
        local = parameter.to_local()
        if shard.shape != local.shape:
            message = (
                f"meta-device init: the shard of a {tuple(parameter.shape)} parameter is "
                f"{tuple(local.shape)} here, but {tuple(shard.shape)} from its placements"
            )
            raise BackendError(message)
        with torch.no_grad():
            local.copy_(shard)
        self._filled.add(key)

    def finish(self) -> None:
        """Keep the shards of the parameters still open (the last ones ``init_weights`` set)."""
        for key in list(self._open):
            self._keep_shard(key)

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.finish()
        super().__exit__(*exc)


def _aliases(model: nn.Module) -> list[list[str]]:
    """The names of each parameter that more than one module holds (tied weights)."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def _retie(model: nn.Module, groups: list[list[str]]) -> None:
    for first, *others in groups:
        parameter = model.get_parameter(first)
        for name in others:
            owner, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(owner), leaf, parameter)


def materialise(model: nn.Module, device: torch.device) -> ShardFiller:
    """Give a ``meta`` model storage on ``device`` and fill it with its ``init_weights()``.

    Tied parameters stay tied (``to_empty`` alone would untie them). Sharded (DTensor)
    parameters are filled shard by shard through :class:`ShardFiller`; plain ones directly.
    Returns the filler (its ``gathered`` count says how often a parameter was re-gathered).

    :raises BackendError: when the model has no ``init_weights()``.
    """
    init_weights = getattr(model, "init_weights", None)
    if not callable(init_weights):
        message = f"{type(model).__name__} has no init_weights(): it cannot be built on meta"
        raise BackendError(message)
    tied = _aliases(model)
    model.to_empty(device=device)
    _retie(model, tied)
    sharded = [p for p in model.parameters() if isinstance(p, DTensor)]
    filler = ShardFiller(sharded)
    with filler, torch.no_grad():
        init_weights()
    return filler
