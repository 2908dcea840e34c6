"""A model a checkpoint will fill, built once: on ``meta``, never initialised, then loaded.

When a run will load a full checkpoint into its model, initialising the model first is wasted
work: Model Zoo's initialisers cost seconds of CPU on a large model, and the checkpoint then
replaces every value. :func:`build_for_loading` builds such a model on the ``meta`` device and
gives each parameter and buffer uninitialised CPU storage (memory the checkpoint's values are
the first to touch); the checkpoint's load writes it. Tensors read into memory of their own (a
Hugging Face folder's, converted to the model's types as they are read) become the model's
storage instead (:func:`adopt`): the load then copies nothing. The model must declare
``init_weights()``
(plugtrain's meta-device contract: the values construction gives, drawing the same random
numbers in the same order); another model is built as usual.

What the checkpoint does not give (a non-persistent buffer, a parameter left out of a
non-strict load, everything when no checkpoint loads after all) is filled by
:func:`fill_pending`: ``init_weights()`` runs from the random state the build began with, and
every call that writes a tensor the checkpoint filled is skipped, so those tensors keep the
checkpoint's values and the others get the values a model built whole gives them. When what is
left draws random numbers, or reads a loaded tensor, the skipped calls run instead against a
scratch copy of the tensor they write (one tensor at a time), drawing what they would.

Random state: a build draws its initial values from the CPU generator whichever way the model
is built, so afterwards the CPU generator is set to a state derived from the one the build
began with (:func:`continue_after_build`), the same for a meta build as for a whole one: what
runs after the build (dropout, a data loader without its own generator) draws the same numbers
either way. ``PLUGTRAIN_META_BUILD=0`` builds whole and initialised, as before.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

__all__ = [
    "adopt",
    "build_for_loading",
    "continue_after_build",
    "fill_pending",
    "is_pending",
    "meta_build_enabled",
]

_PENDING = "_plugtrain_pending_init"


class _Pending:
    """What a model built for loading still needs: the tensors no checkpoint filled yet.

    :param names: each tensor's names (parameters and buffers, tied ones together) in the
        built module.
    :param rng_state: the CPU generator's state before the build.
    """

    def __init__(self, names: list[tuple[str, ...]], rng_state: torch.Tensor) -> None:
        self.names = names
        self.rng_state = rng_state


def meta_build_enabled() -> bool:
    """Whether models a checkpoint will fill are built on ``meta`` (``PLUGTRAIN_META_BUILD``)."""
    return os.environ.get("PLUGTRAIN_META_BUILD", "1") != "0"


def continue_after_build(rng_state: torch.Tensor) -> None:
    """Set the CPU generator to a state derived from ``rng_state``, the state before a build.

    A build draws as many numbers as its initialisers make (none on ``meta``); afterwards
    both ways continue from here, a stream of its own (seeded by a hash of ``rng_state``).
    """
    digest = hashlib.sha256(rng_state.numpy().tobytes()).digest()
    torch.default_generator.manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def build_for_loading(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()``'s model with uninitialised storage, for a checkpoint to fill (see the module).

    Without ``init_weights()``, or with ``PLUGTRAIN_META_BUILD=0``, the model is built whole
    (initialised). Either way the CPU generator continues from :func:`continue_after_build`.
    """
    rng_state = torch.get_rng_state()
    model = None
    if meta_build_enabled():
        with torch.device("meta"):
            model = build()
        if not callable(getattr(model, "init_weights", None)):
            model = None
    if model is None:
        torch.set_rng_state(rng_state)
        model = build()
    else:
        setattr(model, _PENDING, _Pending(_allocate(model), rng_state))
    continue_after_build(rng_state)
    return model


def _allocate(model: nn.Module) -> list[tuple[str, ...]]:
    """Give every ``meta`` tensor of ``model`` empty CPU storage; each tensor's names.

    Parameters keep their identity (``swap_tensors``): whatever holds one (a tied module)
    holds it still.
    """
    names: dict[int, list[str]] = {}
    done: dict[int, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, tensor in list(module._parameters.items()):
            if tensor is None:
                continue
            names.setdefault(id(tensor), []).append(dot + name)
            if tensor.is_meta and id(tensor) not in done:
                fresh = nn.Parameter(_empty(tensor), requires_grad=tensor.requires_grad)
                fresh.__dict__.update(tensor.__dict__)
                torch.utils.swap_tensors(tensor, fresh)
                done[id(tensor)] = tensor
        for name, buffer in list(module._buffers.items()):
            if buffer is None:
                continue
            if buffer.is_meta:
                if id(buffer) not in done:
                    done[id(buffer)] = _empty(buffer)
                module._buffers[name] = done[id(buffer)]
            names.setdefault(id(module._buffers[name]), []).append(dot + name)
    return [tuple(group) for group in names.values()]


def _empty(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu")


def _owner(root: nn.Module) -> tuple[str, nn.Module] | None:
    """The module of ``root`` built for loading (and its name), if one still waits."""
    for prefix, module in root.named_modules():
        if isinstance(getattr(module, _PENDING, None), _Pending):
            return prefix, module
    return None


def is_pending(root: nn.Module) -> bool:
    """Whether ``root`` holds a model built for loading whose storage is not all filled yet."""
    return _owner(root) is not None


def adopt(root: nn.Module, weights: Mapping[str, Any]) -> int:
    """Let ``root``'s unfilled tensors hold ``weights``' tensors themselves; how many did.

    For a model built for loading, about to load ``weights`` whose tensors are its own (not
    views of a file, nor another model's): each tensor of the same type and shape becomes
    the storage of the model's tensor of that name, so the load copies nothing new into
    memory (it copies each onto itself). Others are left to the load.
    """
    found = _owner(root)
    if found is None:
        return 0
    prefix, module = found
    pending: _Pending = getattr(module, _PENDING)
    dot = f"{prefix}." if prefix else ""
    held = module.state_dict(keep_vars=True)
    adopted = 0
    for group in pending.names:
        target = held.get(group[0]) if group[0] in held else None
        value = next((weights[dot + n] for n in group if dot + n in weights), None)
        if target is None or not isinstance(value, torch.Tensor) or value.is_meta:
            continue
        same = value.dtype == target.dtype and value.shape == target.shape
        if same and value.device == target.device and value.is_contiguous():
            target.data = value
            adopted += 1
    return adopted


def fill_pending(root: nn.Module, loaded: Iterable[str] = ()) -> int:
    """Fill what no checkpoint gave a model built for loading; the tensors filled.

    :param root: the model (the one built, or one holding it).
    :param loaded: the names (``root``'s state names) of the tensors a checkpoint wrote;
        none: every tensor is filled with its initial value.
    """
    found = _owner(root)
    if found is None:
        return 0
    prefix, module = found
    pending: _Pending = getattr(module, _PENDING)
    delattr(module, _PENDING)
    dot = f"{prefix}." if prefix else ""
    written = set(loaded)
    left = [group for group in pending.names if not any(dot + n in written for n in group)]
    if not left:
        return 0
    unfilled = {_storage(_tensor(module, group[0])) for group in left}
    every = {_storage(t) for t in (*module.parameters(), *module.buffers())}
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


def _storage(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())


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
            if tensor.device.type == "cpu" and _storage(tensor) in filled:
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


class _SkipFilled(TorchFunctionMode):
    """Skips every whole-tensor fill of a tensor a checkpoint filled (see the module).

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
        target = _target(args, kwargs)
        name = getattr(func, "__name__", "")
        filled = isinstance(target, torch.Tensor) and name in _OVERWRITES
        if filled and target.device.type == "cpu" and _storage(target) in self.filled:
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
        for tensor in _tensors((args, kwargs)):
            if tensor.device.type == "cpu" and _storage(tensor) in self.filled:
                raise _NeedsScratch
        return func(*args, **kwargs)


class _OnScratch(TorchFunctionMode):
    """Runs every call on a tensor a checkpoint filled against a scratch copy of it instead.

    The calls draw what they draw on a model built whole; the filled tensors keep their
    values. One scratch copy at a time: a call touching other filled tensors drops the copies
    of the ones it does not touch.

    :param filled: those tensors' storages (data pointers).
    """

    def __init__(self, filled: set[int]) -> None:
        super().__init__()
        self.filled = filled
        self._open: dict[int, torch.Tensor] = {}

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if _is_metadata(func):
            return func(*args, **kwargs)
        touched: dict[int, torch.Tensor] = {}
        for tensor in _tensors((args, kwargs)):
            if tensor.device.type == "cpu" and _storage(tensor) in self.filled:
                touched[id(tensor)] = tensor
        if not touched:
            return func(*args, **kwargs)
        keys = {_storage(t) for t in touched.values()}
        for key in [k for k in self._open if k not in keys]:
            del self._open[key]

        def swap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or id(value) not in touched:
                return value
            key = _storage(value)
            if key not in self._open:
                self._open[key] = torch.empty(value.untyped_storage().nbytes(), dtype=torch.uint8)
            base = self._open[key].view(value.dtype)
            return base.as_strided(value.shape, value.stride(), value.storage_offset())

        swapped_args, swapped_kwargs = tree_map(swap, (args, kwargs))
        result = func(*swapped_args, **swapped_kwargs)
        target = _target(args, kwargs)
        swapped_target = _target(swapped_args, swapped_kwargs)
        if isinstance(target, torch.Tensor) and result is swapped_target:
            return target
        return result
