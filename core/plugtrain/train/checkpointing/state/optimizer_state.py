"""Whether a checkpoint's per-parameter optimizer state is what this optimizer keeps.

Checked while loading, before "resumed" is logged. Only the optimizer knows which state keys it
reads, so its own state is the reference: an optimizer that creates its state with its groups
(the plugin optimizers) already holds it; for torch's own optimizers, which create it at their
first step, a scratch copy takes one step over stand-ins (one zero parameter with a zero
gradient per group, shape and dtype). A stored state lacking one of those keys (another version
of the optimizer named it otherwise: ``m`` for ``exp_avg``) or holding a tensor of another shape
does not fit. Where neither reference exists (a third-party optimizer creating its state
lazily) the first real step after loading still blames the checkpoint.
"""

from __future__ import annotations

import os
from collections import OrderedDict, defaultdict
from collections.abc import Mapping
from typing import Any

import torch

from plugtrain.errors import CheckpointMismatchError

__all__ = ["check_optimizer_state"]

_Key = tuple[int, tuple[int, ...], torch.dtype, torch.device]


def _shape(value: torch.Tensor) -> str:
    return "[" + ", ".join(map(str, value.shape)) + "]"


def _scratch_states(optimizer: torch.optim.Optimizer) -> dict[_Key, dict[str, Any]] | None:
    """The state one step of a scratch copy creates for each stand-in; ``None`` if it fails.

    Only for torch's own optimizers, which keep nothing but their groups and state: a copy of
    another class could share buffers (flat layouts) with the real one.
    """
    if not type(optimizer).__module__.startswith("torch.optim."):
        return None
    stand_ins: dict[_Key, torch.Tensor] = {}
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        params = []
        for param in group["params"]:
            key = _key(index, param)
            if key not in stand_ins:
                stand_in = torch.zeros_like(param.detach()).requires_grad_(True)
                stand_in.grad = torch.zeros_like(stand_in)
                stand_ins[key] = stand_in
                params.append(stand_in)
        groups.append({**group, "params": params})
    scratch = object.__new__(type(optimizer))
    scratch.__dict__.update(optimizer.__dict__)
    scratch.state = defaultdict(dict)
    scratch.param_groups = groups
    scratch._optimizer_step_pre_hooks = OrderedDict()
    scratch._optimizer_step_post_hooks = OrderedDict()
    try:
        scratch.step()
    except Exception:  # noqa: BLE001 - an optimizer that cannot step here is checked at its first step
        return None
    return {key: dict(scratch.state.get(stand_in, {})) for key, stand_in in stand_ins.items()}


def _key(index: int, param: torch.Tensor) -> _Key:
    return (index, tuple(param.shape), param.dtype, param.device)


def _mismatch(
    where: str, stored: Mapping[str, Any], expected: Mapping[str, Any], name: str
) -> str | None:
    missing = [key for key in expected if key not in stored]
    if missing:
        holds = ", ".join(map(str, stored)) or "nothing"
        return (
            f"{where}: {', '.join(missing)} missing from the checkpoint, which holds {holds} "
            f"({name} keeps {', '.join(expected)}; was the checkpoint written by another "
            "version of the optimizer?)"
        )
    for key, value in expected.items():
        old = stored[key]
        tensors = isinstance(value, torch.Tensor) and isinstance(old, torch.Tensor)
        if tensors and old.shape != value.shape:
            return (
                f"{where}.{key}: shape {_shape(old)} in the checkpoint, "
                f"{_shape(value)} for this {name}"
            )
    return None


def check_optimizer_state(
    path: str | os.PathLike[str], stored: Any, optimizer: torch.optim.Optimizer | None
) -> None:
    """Refuse a stored optimizer ``state_dict`` whose per-parameter state ``optimizer`` can't use.

    A key it keeps is missing, or a tensor has another shape.

    Parameters without stored state (never stepped) are not checked, nor are keys the
    checkpoint has beyond the reference (an optimizer may add some later in training).

    :raises CheckpointMismatchError: naming ``path``, the parameter's state index and the keys.
    """
    if not isinstance(optimizer, torch.optim.Optimizer) or not isinstance(stored, Mapping):
        return
    states, saved_groups = stored.get("state"), stored.get("param_groups")
    if not isinstance(states, Mapping) or not states or not isinstance(saved_groups, list):
        return
    name = type(optimizer).__name__
    scratch: dict[_Key, dict[str, Any]] | None = None
    stepped = False
    for index, (saved, group) in enumerate(zip(saved_groups, optimizer.param_groups, strict=True)):
        for saved_id, param in zip(saved.get("params", ()), group["params"], strict=True):
            state = states.get(saved_id)
            if not isinstance(state, Mapping) or not state:
                continue
            expected = optimizer.state.get(param)
            if not expected:
                if not stepped:
                    scratch, stepped = _scratch_states(optimizer), True
                expected = (scratch or {}).get(_key(index, param))
            if not expected:
                continue
            problem = _mismatch(f"optimizer.state.{saved_id}", state, expected, name)
            if problem is not None:
                raise CheckpointMismatchError(f"{path}: does not fit this run: {problem}")
