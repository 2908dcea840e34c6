"""The checkpoint state rule: everything saved must load again with ``weights_only=True``.

Checkpoints are read with ``torch.load(..., weights_only=True)``, which accepts tensors, numbers,
strings, ``None`` and lists, tuples and dicts of them, and refuses any other pickled object. A
component whose ``state_dict()`` holds something else (a natural torch scheduler keeping a
custom object in its ``__dict__``) would write checkpoints that no run can resume from. The
Trainer therefore reads its first checkpoint back at once and, when that fails, names the
component at fault and removes the useless file; ``plugtrain.testing`` runs the same round trip
on a plugin's components.
"""

from __future__ import annotations

import collections
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from plugtrain.bases.tags import named_tags
from plugtrain.discovery.attribution import describe_owner
from plugtrain.errors import CheckpointError

__all__ = [
    "plain_problems",
    "round_trip_problems",
    "verify_first_checkpoint",
    "weights_only_problem",
]

RULE = (
    "keep only tensors, numbers, strings, None and lists, tuples and dicts of them in state_dict()"
)

_GLOBAL = re.compile(r"Unsupported global: GLOBAL ([\w.]+)")


def _reason(exc: BaseException) -> str:
    text = str(exc)
    found = _GLOBAL.search(text)
    if found:
        return f"it holds a {found.group(1)} object"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"


def _reloaded(state: Any) -> tuple[Any, str | None]:
    """``state`` after ``torch.save`` and ``torch.load(weights_only=True)``, or why it fails."""
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
    except Exception as exc:  # noqa: BLE001 - reported with the component's name
        return None, f"it cannot be saved: {type(exc).__name__}: {exc}"
    buffer.seek(0)
    try:
        return torch.load(buffer, map_location="cpu", weights_only=True), None
    except Exception as exc:  # noqa: BLE001
        return None, _reason(exc)


def weights_only_problem(state: Any) -> str | None:
    """Why ``state`` would not load back with ``weights_only=True``, or ``None`` when it does."""
    return _reloaded(state)[1]


def _loads(path: Path) -> bool:
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - the parts are examined one by one below
        return False
    return True


def _culprits(state: Mapping[str, Any], owners: Mapping[str, Any]) -> list[str]:
    found = []
    for key, value in state.items():
        owner = owners.get(key)
        if isinstance(owner, Sequence) and isinstance(value, Sequence):
            for index, (item, item_owner) in enumerate(zip(value, owner, strict=False)):
                problem = weights_only_problem(item)
                if problem is not None:
                    found.append(f"{key}[{index}] ({describe_owner(item_owner)}): {problem}")
            continue
        problem = weights_only_problem(value)
        if problem is not None:
            label = key if owner is None else f"{key} ({describe_owner(owner)})"
            found.append(f"{label}: {problem}")
    return found


_PLAIN_LEAVES = frozenset({str, int, float, bool, type(None), torch.dtype, torch.device})


def _only_plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is certainly loadable with ``weights_only=True`` (tensors, plain data).

    A quick walk; ``False`` only means "check exactly" (:func:`weights_only_problem`).
    """
    if type(value) in _PLAIN_LEAVES or isinstance(value, torch.Tensor):
        return True  # exact types: a numpy float is a float but does not load
    if depth > 50:
        return False
    if type(value) in (dict, collections.OrderedDict):
        return all(
            _only_plain(k, depth + 1) and _only_plain(v, depth + 1) for k, v in value.items()
        )
    if type(value) in (list, tuple, torch.Size):
        return all(_only_plain(item, depth + 1) for item in value)
    return False


def plain_problems(state: Mapping[str, Any], owners: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(where, problem)`` of each part of ``state`` that would not load back; cheap.

    Parts made of tensors and plain data pass at a glance; only another object makes the
    exact round trip run (on that part alone). ``where`` is ``"callbacks[0]"``, ``"model"`` ...,
    and names its owner.
    """
    found: list[tuple[str, str]] = []
    for key, value in state.items():
        if _only_plain(value):
            continue
        owner = owners.get(key)
        if isinstance(owner, Sequence) and isinstance(value, Sequence):
            for index, (item, item_owner) in enumerate(zip(value, owner, strict=False)):
                if not _only_plain(item):
                    problem = weights_only_problem(item)
                    if problem is not None:
                        found.append(
                            (f"{key}[{index}]", f"{describe_owner(item_owner)}: {problem}")
                        )
            continue
        problem = weights_only_problem(value)
        if problem is not None:
            label = f"{describe_owner(owner)}: " if owner is not None else ""
            found.append((key, label + problem))
    return found


def verify_first_checkpoint(
    path: str | Path, state: Mapping[str, Any], owners: Mapping[str, Any]
) -> None:
    """Read the checkpoint just written at ``path`` with ``weights_only=True``.

    :param state: what was saved, by top-level key.
    :param owners: the object behind a key (``model``, ``optimizer``) or a list of objects
        (``schedulers``), named in the error.
    :raises CheckpointError: naming each component whose state does not load; the file is
        removed, so that no later run tries to resume from it.
    """
    path = Path(path)
    if _loads(path):
        return
    found = _culprits(state, owners) or [f"the checkpoint as a whole: {RULE}"]
    path.unlink(missing_ok=True)
    message = (
        f"{path}: the checkpoint would not load with weights_only=True, so no run could resume "
        f"from it (it was removed): " + "; ".join(found) + f". {RULE[0].upper()}{RULE[1:]}."
    )
    raise CheckpointError(message)


# -- the contract check's round trip (plugtrain.testing) -----------------------------------


def _optimizer_for(arguments: Mapping[str, Any]) -> torch.optim.Optimizer:
    """SGD with an untagged group and one group per tag the scheduler asks for."""
    groups: list[dict[str, Any]] = [{"params": [torch.zeros(2, requires_grad=True)]}]
    groups += [
        {"params": [torch.zeros(2, requires_grad=True)], "tags": tag}
        for tag in named_tags(arguments.get("param_group_tags"))
    ]
    return torch.optim.SGD(groups, lr=0.1, weight_decay=0.01)


def _values(optimizer: torch.optim.Optimizer) -> list[tuple[Any, Any]]:
    return [(g.get("lr"), g.get("weight_decay")) for g in optimizer.param_groups]


def _scheduler_round_trip(build: Any, arguments: Mapping[str, Any], steps: int) -> list[str]:
    first = _optimizer_for(arguments)
    scheduler = build(first, **arguments)
    for _ in range(steps):
        first.step()
        scheduler.step()
    loaded, problem = _reloaded(scheduler.state_dict())
    if problem is not None:
        return [f"its state_dict() does not load with weights_only=True: {problem}; {RULE}"]
    second = _optimizer_for(arguments)
    resumed = build(second, **arguments)
    # as from a checkpoint: the optimizer (its groups' values) first, then the scheduler
    second.load_state_dict(first.state_dict())
    resumed.load_state_dict(loaded)
    problems = []
    for step in range(steps, 2 * steps + 1):
        if _values(first) != _values(second):
            problems.append(
                f"after load_state_dict() at step {steps} it writes {_values(second)} at step "
                f"{step}, the uninterrupted scheduler {_values(first)}: resume is not exact"
            )
            break
        first.step()
        scheduler.step()
        second.step()
        resumed.step()
    return problems


def _optimizer_round_trip(build: Any, arguments: Mapping[str, Any], steps: int) -> list[str]:
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(4, 3, generator=generator)
    gradients = [torch.randn(4, 3, generator=generator) for _ in range(2 * steps)]

    def run(parameter: torch.Tensor, optimizer: Any, chosen: Sequence[torch.Tensor]) -> None:
        for gradient in chosen:
            parameter.grad = gradient.clone()
            optimizer.step()

    weight = start.clone().requires_grad_()
    optimizer = build([weight], **arguments)
    run(weight, optimizer, gradients[:steps])
    loaded, problem = _reloaded(optimizer.state_dict())
    if problem is not None:
        return [f"its state_dict() does not load with weights_only=True: {problem}; {RULE}"]
    copy = weight.detach().clone().requires_grad_()
    resumed = build([copy], **arguments)
    resumed.load_state_dict(loaded)
    run(weight, optimizer, gradients[steps:])
    run(copy, resumed, gradients[steps:])
    if not torch.equal(weight.detach(), copy.detach()):
        return [f"after load_state_dict() at step {steps} its updates differ: resume is not exact"]
    return []


def _model_round_trip(build: Any, arguments: Mapping[str, Any], steps: int) -> list[str]:
    model = build(**arguments)
    loaded, problem = _reloaded(model.state_dict())
    if problem is not None:
        return [f"its state_dict() does not load with weights_only=True: {problem}; {RULE}"]
    build(**arguments).load_state_dict(loaded)
    return []


_ROUND_TRIPS = {
    "scheduler": _scheduler_round_trip,
    "optimizer": _optimizer_round_trip,
    "model": _model_round_trip,
}


def round_trip_problems(
    kind: str, build: Any, arguments: Mapping[str, Any], steps: int = 3
) -> list[str] | None:
    """What goes wrong when a component's state goes through a checkpoint and back.

    The component is built from ``arguments`` (a scheduler on an SGD optimizer with a group per
    tag it asks for, an optimizer on one 4x3 tensor), advanced ``steps`` steps, its
    ``state_dict()`` saved and loaded with ``weights_only=True`` and loaded into a fresh one;
    schedulers and optimizers must then continue exactly as the uninterrupted one.

    :returns: the problems, or ``None`` for a kind whose state does not go into checkpoints.
    """
    check = _ROUND_TRIPS.get(kind)
    if check is None:
        return None
    try:
        return check(build, arguments, steps)
    except Exception as exc:  # noqa: BLE001 - a contract check reports, it does not raise
        return [f"cannot be built and stepped for the round trip: {type(exc).__name__}: {exc}"]
