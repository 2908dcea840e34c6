"""Run files: loading YAML with positions, overrides, and validation against the registry."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from plugtrain.config.overrides import apply_overrides
from plugtrain.config.sections import (
    CheckpointSettings,
    LoggingSettings,
    LoopSettings,
)
from plugtrain.config.validate import TrainerPlan, check_run
from plugtrain.config.yaml_loader import load_yaml, read_yaml_file

__all__ = [
    "CheckpointSettings",
    "LoggingSettings",
    "LoopSettings",
    "TrainerPlan",
    "apply_overrides",
    "check_run",
    "load_run_file",
    "load_yaml",
]


def load_run_file(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Any:
    """Read a run file and apply ``--set`` overrides (``a.b.c=VALUE``) to it."""
    data = read_yaml_file(path)
    return apply_overrides(data, overrides) if overrides else data
