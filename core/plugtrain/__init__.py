"""plugtrain: train PyTorch models from YAML or Python; every component is a plugin found by name.

Importing this package is cheap: it does not import torch. Names such as ``Trainer``,
``optim``, ``partition_params_group_with_tags``, ``build_optimization`` or ``build_component`` (a
component of a run file's plan, as the Trainer builds it) are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from plugtrain import _public_paths
from plugtrain._version import PLUGIN_API_VERSION, __version__
from plugtrain.contract.hookspecs import hookimpl
from plugtrain.discovery.loading import get_plugin_manager, get_registry
from plugtrain.errors import (
    BackendError,
    ConfigError,
    ConfigIssue,
    DuplicateNameError,
    PluginLoadError,
    PlugtrainError,
    UnknownNameError,
)
from plugtrain.registry.components import Component, ComponentInfo, PluginInfo, Registry
from plugtrain.registry.schema import arg

if TYPE_CHECKING:
    from plugtrain import distributed, optim
    from plugtrain.bases.backend import backend
    from plugtrain.bases.param_groups import (
        configure_param_groups,
        partition_params_group_with_tags,
    )
    from plugtrain.train.assembly import build_optimization
    from plugtrain.train.components import build_component
    from plugtrain.train.trainer import Trainer

    ClusterConfig: Any  # the CSX backend plugin's class, found through the registry


_public_paths.install()

__all__ = [
    "PLUGIN_API_VERSION",
    "BackendError",
    "ClusterConfig",
    "Component",
    "ComponentInfo",
    "ConfigError",
    "ConfigIssue",
    "DuplicateNameError",
    "PluginInfo",
    "PluginLoadError",
    "PlugtrainError",
    "Registry",
    "Trainer",
    "UnknownNameError",
    "__version__",
    "arg",
    "backend",
    "build_component",
    "build_optimization",
    "configure_param_groups",
    "describe",
    "distributed",
    "get_plugin_manager",
    "get_registry",
    "hookimpl",
    "names",
    "optim",
    "partition_params_group_with_tags",
    "resolve",
]


def resolve(kind: str, name: str) -> Any:
    """The implementation registered as ``name`` of ``kind``, imported on first use.

    :param kind: ``"optimizer"``, ``"scheduler"``, ``"backend"``, ``"model"`` or ``"dataloader"``.
    :param name: as users write it; matched exactly, else case-insensitively when unique; a
        provider prefix picks one of several providers: ``"plugtrain-optimizers:SGD"``.
    :raises UnknownNameError: with close matches and the installed providers.
    :raises DuplicateNameError: when two plugins provide ``name`` and none was chosen.
    """
    return get_registry().resolve(kind, name)


def names(kind: str) -> list[str]:
    """The sorted names registered for ``kind``; imports no implementation."""
    return get_registry().names(kind)


def describe(kind: str, name: str) -> ComponentInfo:
    """Provider, version, summary and arguments of a component; imports no implementation."""
    return get_registry().describe(kind, name)


_LAZY = {
    "optim": ("plugtrain.optim", None),
    "backend": ("plugtrain.bases.backend", "backend"),
    "distributed": ("plugtrain.distributed", None),
    "ClusterConfig": ("plugtrain.distributed", "ClusterConfig"),
    "partition_params_group_with_tags": (
        "plugtrain.bases.param_groups",
        "partition_params_group_with_tags",
    ),
    "configure_param_groups": ("plugtrain.bases.param_groups", "configure_param_groups"),
    "build_optimization": ("plugtrain.train.assembly.optimization", "build_optimization"),
    "build_component": ("plugtrain.train.components", "build_component"),
    "Trainer": ("plugtrain.train.trainer", "Trainer"),
}


def __getattr__(name: str) -> Any:
    if f"plugtrain.{name}" in _public_paths.PUBLIC_PATHS:
        return importlib.import_module(f"plugtrain.{name}")
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        message = f"module 'plugtrain' has no attribute {name!r}"
        raise AttributeError(message) from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value
