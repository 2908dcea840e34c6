"""The optimizer evaluation contract: ``eval()`` around evaluations and saves, ``train()`` after.

An optimizer that keeps other weights than the ones it trains (Schedule-Free, averaging
optimizers) defines ``train()`` and ``eval()`` (:class:`plugtrain.protocols.Optimizer`). The
Trainer calls ``eval()`` before every evaluation (``fit``'s, ``validate``, ``validate_all``) and
before a checkpoint is written, and ``train()`` after them and at the start of ``fit``. An
optimizer without both methods is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["evaluation_mode", "has_modes", "training_mode"]


def has_modes(optimizer: Any) -> bool:
    """Whether ``optimizer`` defines both ``train()`` and ``eval()``."""
    return callable(getattr(optimizer, "train", None)) and callable(
        getattr(optimizer, "eval", None)
    )


def training_mode(optimizer: Any) -> None:
    """Call ``optimizer.train()`` where the optimizer has modes."""
    if has_modes(optimizer):
        optimizer.train()


@contextmanager
def evaluation_mode(optimizer: Any) -> Iterator[None]:
    """``optimizer.eval()`` on entry and ``optimizer.train()`` on exit (even on an error).

    :param optimizer: the trainer's optimizer, ``None``, or one without modes (nothing is done).
    """
    if optimizer is None or not has_modes(optimizer):
        yield
        return
    optimizer.eval()
    try:
        yield
    finally:
        optimizer.train()
