"""Whether a loaded checkpoint fits the run that loads it, checked before anything is changed.

Another model (a key missing, a shape different), another optimizer (its param groups lack this
optimizer's hyperparameters, or another class wrote it) or another number of schedulers is a
:class:`~plugtrain.errors.CheckpointMismatchError` naming the file and the first key
that differs. Weights that are not finite make the file unusable
(:class:`~plugtrain.errors.CorruptCheckpointError`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from plugtrain.errors import CheckpointMismatchError, CorruptCheckpointError
from plugtrain.train.loop import first_non_finite

__all__ = ["check_fits"]


def _shape(tensor: torch.Tensor) -> str:
    return "[" + ", ".join(map(str, tensor.shape)) + "]"


def _model_mismatch(
    saved: Mapping[str, Any], expected: Mapping[str, torch.Tensor], strict: bool = True
) -> str | None:
    for key, tensor in expected.items():
        if key not in saved:
            if not strict:
                continue
            return f"model.{key}: missing from the checkpoint"
        if saved[key].shape != tensor.shape:
            return (
                f"model.{key}: shape {_shape(saved[key])} in the checkpoint, "
                f"{_shape(tensor)} in this model"
            )
    for key in saved:
        if key not in expected and strict:
            return f"model.{key}: in the checkpoint but not in this model"
    return None


def _optimizer_mismatch(
    saved: Mapping[str, Any], optimizer: torch.optim.Optimizer, saved_class: Any
) -> str | None:
    """The first difference; hyperparameters are compared when another (or no) class is named.

    A hyperparameter counts when this optimizer's default for it is a value (not ``None`` or
    ``False``, the switches that implementations and torch's ``__setstate__`` fill in or read
    with ``get``): SGD's ``momentum``, AdamW's ``betas``. Another class whose groups hold all of
    them is accepted (a subclass of the same algorithm resumes).
    """
    this_class = type(optimizer).__name__
    known = isinstance(saved_class, str)
    written_by = f" (written by {saved_class}, this run uses {this_class})" if known else ""
    groups = saved["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        count = len(groups) if isinstance(groups, list) else "no list of"
        return (
            f"optimizer.param_groups: {count} groups in the checkpoint, "
            f"{len(optimizer.param_groups)} in this optimizer{written_by}"
        )
    for index, (old, new) in enumerate(zip(groups, optimizer.param_groups, strict=True)):
        if not isinstance(old, Mapping) or len(old.get("params", ())) != len(new["params"]):
            return (
                f"optimizer.param_groups.{index}.params: another number of parameters "
                f"than this optimizer's {len(new['params'])}{written_by}"
            )
    if known and saved_class == this_class:
        return None
    needed = [k for k, v in optimizer.defaults.items() if v is not None and v is not False]
    for index, old in enumerate(groups):
        for key in needed:
            if key not in old:
                return (
                    f"optimizer.param_groups.{index}.{key}: missing from the checkpoint, "
                    f"which holds another optimizer's state{written_by}"
                )
    return None


def check_fits(
    path: str | os.PathLike[str],
    state: Mapping[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    schedulers: Sequence[Any],
    *,
    strict: bool = True,
) -> None:
    """Refuse a checkpoint that does not fit ``model``, ``optimizer`` and ``schedulers``.

    :param state: what :func:`.archive.load_checkpoint` returned; parts that
        are absent (a callback chose not to restore them) are not checked.
    :param strict: ``False`` (``disable_strict_checkpoint_loading``): model keys missing from
        the checkpoint or unknown to the model are allowed (shapes of shared keys must agree);
        pass ``optimizer=None`` when they differ, since its state cannot fit then.
    :raises CheckpointMismatchError: naming ``path`` and the first key that differs.
    :raises CorruptCheckpointError: when a parameter holds a NaN or an infinity.
    """
    problem = (
        _model_mismatch(state["model"], model.state_dict(), strict) if "model" in state else None
    )
    if problem is None and optimizer is not None and state.get("optimizer") is not None:
        saved_class = (state.get("metadata") or {}).get("optimizer")
        problem = _optimizer_mismatch(state["optimizer"], optimizer, saved_class)
    saved_schedulers = state.get("schedulers") or []
    if problem is None and "schedulers" in state and len(saved_schedulers) != len(schedulers):
        problem = (
            f"schedulers: {len(saved_schedulers)} scheduler states in the checkpoint, "
            f"{len(schedulers)} schedulers in this run"
        )
    if problem is not None:
        raise CheckpointMismatchError(f"{path}: does not fit this run: {problem}")
    if "model" not in state:  # a callback chose to keep the model as it is
        return
    names = [name for name, _ in model.named_parameters()]
    bad = first_non_finite(state["model"], names)
    if bad is not None:
        message = f"{path}: holds non-finite weights (NaN or infinity in model.{bad})"
        raise CorruptCheckpointError(message)
