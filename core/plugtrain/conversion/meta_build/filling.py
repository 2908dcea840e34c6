"""Filling what no checkpoint gave a model built for loading, with its initial values.

:func:`fill_pending` runs the model's ``init_weights()`` from the random state its build began
with, so that every tensor it fills gets the value a model built whole gives it. Calls that
write a tensor a checkpoint filled are skipped (``torch.nn.init``'s fills, and tensor methods
that overwrite their tensor), leaving the checkpoint's values; when what is left draws random
numbers or reads a loaded tensor, skipping would change what it gets, so ``init_weights()``
runs again with every call on a loaded tensor made against a scratch copy of it instead (one
at a time): the draws and values are those of a whole build, and the loaded tensors keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from plugtrain.conversion.meta_build.bfloat16 import BUILT_AS
from plugtrain.conversion.meta_build.building import PENDING, Pending, pending_in, storage_of

__all__ = ["fill_pending"]


def fill_pending(root: nn.Module, loaded: Iterable[str] = ()) -> int:
    """Fill what no checkpoint gave a model built for loading; the tensors filled.

    :param root: the model (the one built, or one holding it).
    :param loaded: the names (``root``'s state names) of the tensors a checkpoint wrote;
        none: every tensor is filled with its initial value.
    """
    found = pending_in(root)
    if found is None:
        return 0
    prefix, module = found
    pending: Pending = getattr(module, PENDING)
    delattr(module, PENDING)
    dot = f"{prefix}." if prefix else ""
    written = set(loaded)
    left = [group for group in pending.names if not any(dot + n in written for n in group)]
    if not left:
        return 0
    unfilled = {storage_of(_tensor(module, group[0])) for group in left}
    every = {storage_of(t) for t in (*module.parameters(), *module.buffers())}
    init_weights: Callable[[], None] = getattr(module, "init_weights")  # noqa: B009
    with _random_state(pending.rng_state), torch.no_grad():
        try:
            with _skipping_initialisers(every - unfilled), _SkipFilled(every - unfilled):
                init_weights()
        except _NeedsScratch:
            torch.set_rng_state(pending.rng_state)
            with _OnScratch(every - unfilled):
                init_weights()
    return len(left)


def _tensor(module: nn.Module, name: str) -> torch.Tensor:
    owner, _, leaf = name.rpartition(".")
    holder = module.get_submodule(owner) if owner else module
    tensor = getattr(holder, leaf)
    assert isinstance(tensor, torch.Tensor)
    return tensor


@contextmanager
def _random_state(state: torch.Tensor) -> Iterator[None]:
    """Run from the CPU generator state ``state``; the generator's own state after."""
    now = torch.get_rng_state()
    torch.set_rng_state(state)
    try:
        yield
    finally:
        torch.set_rng_state(now)


class _NeedsScratch(Exception):
    """What is left to fill draws random numbers or reads a loaded tensor."""


_OVERWRITES = frozenset(
    (
        *("normal_", "uniform_", "fill_", "zero_", "copy_", "random_", "trunc_normal_"),
        *("constant_", "ones_", "zeros_", "eye_", "dirac_", "orthogonal_", "sparse_"),
        *("xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"),
    )
)
"""Calls (tensor methods and ``torch.nn.init`` functions) that write every element of their
first argument without reading it."""
_METADATA = frozenset(
    ("shape", "dtype", "device", "ndim", "requires_grad", "is_leaf", "layout", "is_meta")
)
_METADATA_METHODS = frozenset(("dim", "size", "numel", "element_size", "is_floating_point"))


def _is_metadata(func: Any) -> bool:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", "") == "__get__" and owner is not None:
        return getattr(owner, "__name__", "") in _METADATA
    return getattr(func, "__name__", "") in _METADATA_METHODS


def _tensors(tree: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map(lambda v: found.append(v) if isinstance(v, torch.Tensor) else None, tree)
    return found


def _target(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("tensor")  # torch.nn.init passes tensor=


@contextmanager
def _skipping_initialisers(filled: set[int]) -> Iterator[None]:
    """``torch.nn.init``'s fills return a filled tensor untouched while this runs.

    Some (``trunc_normal_``) take no part in torch's function overrides, so no mode sees them
    whole: their inner calls read the tensor they fill.
    """
    originals = {n: getattr(nn.init, n) for n in _OVERWRITES if hasattr(nn.init, n)}

    def skipping(original: Callable[..., Any]) -> Callable[..., Any]:
        def fill(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if _in(filled, tensor):
                return tensor
            return original(tensor, *args, **kwargs)

        return fill

    try:
        for name, original in originals.items():
            setattr(nn.init, name, skipping(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(nn.init, name, original)


def _in(filled: set[int], tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is (a view of) one of the ``filled`` CPU storages."""
    return tensor.device.type == "cpu" and storage_of(tensor) in filled


class _AroundFilled(TorchFunctionMode):
    """What the modes running around the tensors a checkpoint filled share.

    Metadata reads (shape, dtype, ...) run as they are; every other call goes to :meth:`call`.

    :param filled: those tensors' storages (data pointers).
    """

    def __init__(self, filled: set[int]) -> None:
        super().__init__()
        self.filled = filled

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if _is_metadata(func):
            return func(*args, **kwargs)
        return self.call(func, args, kwargs)

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``func`` (see the subclasses)."""
        raise NotImplementedError


class _SkipFilled(_AroundFilled):
    """Skips every whole-tensor fill of a tensor a checkpoint filled (see the module)."""

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The filled target as it is for a fill; else ``func``, guarded."""
        target = _target(args, kwargs)
        fill = getattr(func, "__name__", "") in _OVERWRITES
        if fill and isinstance(target, torch.Tensor) and _in(self.filled, target):
            return target
        with _Guard(self.filled):
            return func(*args, **kwargs)


class _Guard(TorchDispatchMode):
    """Raises :class:`_NeedsScratch` at a random draw or a read of a filled tensor."""

    def __init__(self, filled: set[int]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.filled = filled

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            raise _NeedsScratch
        if any(_in(self.filled, tensor) for tensor in _tensors((args, kwargs))):
            raise _NeedsScratch
        return func(*args, **kwargs)


class _OnScratch(_AroundFilled):
    """Runs every call on a tensor a checkpoint filled against a scratch copy of it instead.

    The calls draw what they draw on a model built whole (a parameter held in bfloat16 gets a
    scratch copy of the type it was built in); the filled tensors keep their values. One
    scratch copy at a time: a call touching other filled tensors drops the copies of the ones
    it does not touch.
    """

    def __init__(self, filled: set[int]) -> None:
        super().__init__(filled)
        self._open: dict[int, torch.Tensor] = {}

    def call(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` with each filled tensor it touches swapped for its scratch copy."""
        touched: dict[int, torch.Tensor] = {}
        for tensor in _tensors((args, kwargs)):
            if _in(self.filled, tensor):
                touched[id(tensor)] = tensor
        if not touched:
            return func(*args, **kwargs)
        keys = {storage_of(t) for t in touched.values()}
        for key in [k for k in self._open if k not in keys]:
            del self._open[key]

        def swap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or id(value) not in touched:
                return value
            key = storage_of(value)
            built = getattr(value, BUILT_AS, value.dtype)  # draws as into the model as built
            if key not in self._open:
                size = value.untyped_storage().nbytes() // value.element_size() * built.itemsize
                self._open[key] = torch.empty(size, dtype=torch.uint8)
            base = self._open[key].view(built)
            return base.as_strided(value.shape, value.stride(), value.storage_offset())

        swapped_args, swapped_kwargs = tree_map(swap, (args, kwargs))
        result = func(*swapped_args, **swapped_kwargs)
        target = _target(args, kwargs)
        swapped_target = _target(swapped_args, swapped_kwargs)
        if isinstance(target, torch.Tensor) and result is swapped_target:
            return target
        return result
