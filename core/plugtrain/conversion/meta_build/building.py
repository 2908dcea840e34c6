"""Building a model a checkpoint will fill: on ``meta``, with storage no initialiser touches.

When a run will load a full checkpoint into its model, initialising the model first is wasted
work: Model Zoo's initialisers cost seconds of CPU on a large model, and the checkpoint then
replaces every value. :func:`build_for_loading` builds such a model on the ``meta`` device and
gives each parameter and buffer uninitialised CPU storage (memory the checkpoint's values are
the first to touch); the checkpoint's load writes it. Tensors read into memory of their own (a
Hugging Face folder's, converted to the model's types as they are read) become the model's
storage instead (:func:`adopt`): the load then copies nothing. The model must declare
``init_weights()`` (plugtrain's meta-device contract: the values construction gives, drawing
the same random numbers in the same order); another model is built as usual. What no
checkpoint fills gets its initial values from :func:`~.filling.fill_pending`.

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

__all__ = [
    "PENDING",
    "Pending",
    "adopt",
    "build_for_loading",
    "continue_after_build",
    "covers",
    "is_pending",
    "meta_build_enabled",
    "on_meta",
    "pending_in",
    "storage_of",
]

PENDING = "_plugtrain_pending_init"


class Pending:
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
        with on_meta():
            model = build()
        if not callable(getattr(model, "init_weights", None)):
            model = None
    if model is None:
        torch.set_rng_state(rng_state)
        model = build()
    else:
        setattr(model, PENDING, Pending(_allocate(model), rng_state))
    continue_after_build(rng_state)
    return model


@contextmanager
def on_meta() -> Iterator[None]:
    """Tensors made while this runs are on the ``meta`` device (shapes and types, no memory).

    As ``torch.device("meta")``, less the cost of drawing initial values no tensor keeps.
    """
    with torch.device("meta"), _NoValuesOnMeta():
        yield


class _NoValuesOnMeta(TorchFunctionMode):
    """``normal_`` of a ``meta`` tensor returns the tensor: there are no values to draw.

    torch's own ``meta`` path for it imports the compiler (a second of a command's start-up).
    """

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")  # torch.nn.init passes tensor=
        drawn = getattr(func, "__name__", "") == "normal_"
        if drawn and isinstance(target, torch.Tensor) and target.is_meta:
            return target
        return func(*args, **kwargs)


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


def pending_in(root: nn.Module) -> tuple[str, nn.Module] | None:
    """The module of ``root`` built for loading (and its name), if one still waits."""
    for prefix, module in root.named_modules():
        if isinstance(getattr(module, PENDING, None), Pending):
            return prefix, module
    return None


def is_pending(root: nn.Module) -> bool:
    """Whether ``root`` holds a model built for loading whose storage is not all filled yet."""
    return pending_in(root) is not None


def covers(root: nn.Module, names: Iterable[str]) -> bool:
    """Whether ``names`` (``root``'s state names) hold every unfilled tensor of its state.

    ``True`` when ``root`` waits for nothing (no model built for loading in it).
    """
    found = pending_in(root)
    if found is None:
        return True
    prefix, module = found
    pending: Pending = getattr(module, PENDING)
    dot = f"{prefix}." if prefix else ""
    given = set(names)
    state = module.state_dict(keep_vars=True).keys()
    return all(any(dot + n in given for n in group) for group in pending.names if group[0] in state)


def adopt(root: nn.Module, weights: Mapping[str, Any]) -> int:
    """Let ``root``'s unfilled tensors hold ``weights``' tensors themselves; how many did.

    For a model built for loading, about to load ``weights`` whose tensors are its own (not
    views of a file, nor another model's): each tensor of the same type and shape becomes
    the storage of the model's tensor of that name, so the load copies nothing new into
    memory (it copies each onto itself). Others are left to the load.
    """
    found = pending_in(root)
    if found is None:
        return 0
    prefix, module = found
    pending: Pending = getattr(module, PENDING)
    dot = f"{prefix}." if prefix else ""
    held = module.state_dict(keep_vars=True)
    adopted = 0
    taken: set[int] = set()  # a tensor held under two names becomes one model tensor only
    for group in pending.names:
        target = held.get(group[0]) if group[0] in held else None
        value = next((weights[dot + n] for n in group if dot + n in weights), None)
        if target is None or not isinstance(value, torch.Tensor) or value.is_meta:
            continue
        same = value.dtype == target.dtype and value.shape == target.shape
        fits = same and value.device == target.device and value.is_contiguous()
        if fits and storage_of(value) not in taken:
            taken.add(storage_of(value))
            target.data = value
            adopted += 1
    return adopted


def storage_of(tensor: torch.Tensor) -> int:
    """Where ``tensor``'s memory begins: tensors that share it (views, ties) share this."""
    return int(tensor.untyped_storage().data_ptr())
