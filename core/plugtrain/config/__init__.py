"""Run files: loading YAML with positions, overrides, and validation into a plan."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from plugtrain.config.plan import RunPlan, TrainerPlan
from plugtrain.config.reading.overrides import apply_overrides
from plugtrain.config.reading.yaml_loader import load_yaml, read_yaml_file
from plugtrain.config.sections import (
    CheckpointSettings,
    LoggingSettings,
    LoopSettings,
)
from plugtrain.config.validation.validate import check_run, plan_run

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = [
    "CheckpointSettings",
    "LoggingSettings",
    "LoopSettings",
    "RunPlan",
    "TrainerPlan",
    "apply_overrides",
    "check_run",
    "load_plan",
    "load_run_file",
    "load_yaml",
    "plan_run",
    "run_registry",
]


def load_run_file(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Any:
    """Read a run file and apply ``--set`` overrides (``a.b.c=VALUE``) to it."""
    data = read_yaml_file(path)
    return apply_overrides(data, overrides) if overrides else data


def run_registry(modules: Sequence[str] = (), *, import_local: bool = True) -> Registry:
    """The registry a run resolves its names with.

    The process-wide registry when it already holds the plugin ``modules`` a run file names
    (``plugins:``); otherwise a new registry with them added, built from the same settings. The
    process-wide registry is never changed.

    :param import_local: import every listed module (``fit``, ``validate``); when false
        (``check``, ``plot``) only installed plugins and those named with ``-p``.
    """
    from plugtrain.discovery import loading as plugins

    settings = plugins.current_settings() or plugins.PluginSettings.from_env()
    wanted = plugins.run_file_plugin_settings(modules, import_local=import_local, settings=settings)
    if wanted == settings:
        return plugins.get_registry()
    return plugins.build_registry(wanted, extra=plugins.current_extra())


def load_plan(
    path: str | os.PathLike[str],
    overrides: Sequence[str] = (),
    *,
    import_local: bool = False,
    model_only: bool = False,
) -> tuple[RunPlan, Registry]:
    """Read, override and validate a run file once: its plan and the registry to build it with.

    Loads the plugin modules the file names (``plugins:``) into the run's registry only; imports
    no torch. A run file is input from outside: its local modules are imported only with
    ``import_local`` (``fit``, ``validate``), else only installed plugins and ``-p`` modules.
    ``model_only`` plans what builds the trainers, their work sections left out
    (:func:`plugtrain.config.validation.validate.plan_run`).

    :raises ConfigError: listing every problem with its path and position.
    """
    data = load_run_file(path, overrides)
    modules = data.get("plugins") if isinstance(data, dict) else None
    wanted = [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []
    registry = run_registry(wanted, import_local=import_local)
    return plan_run(data, registry, str(path), model_only=model_only), registry
