"""Validated plans of run files, as ``plugtrain check`` makes them (no torch imported)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from plugtrain.config import load_plan


def trainer_plans(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> list[Any]:
    """The trainers' plans of a run file, validated with its ``plugins:`` (installed ones only)."""
    plan, _registry = load_plan(path, overrides)
    return list(plan.trainers)
