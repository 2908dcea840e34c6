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

import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from plugtrain.attribution import describe_owner
from plugtrain.train.checkpoint import CheckpointError

__all__ = ["verify_first_checkpoint", "weights_only_problem"]

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


def weights_only_problem(state: Any) -> str | None:
    """Why ``state`` would not load back with ``weights_only=True``, or ``None`` when it does."""
    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
    except Exception as exc:  # noqa: BLE001 - reported with the component's name
        return f"it cannot be saved: {type(exc).__name__}: {exc}"
    buffer.seek(0)
    try:
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        return _reason(exc)
    return None


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
