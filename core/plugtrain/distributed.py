"""``plugtrain.distributed`` mirrors ``cerebras.pytorch.distributed``: ``ClusterConfig``.

The cluster configuration belongs to the plugin that provides the ``CSX`` backend (the core never
imports a plugin), so ``ClusterConfig`` is that backend class's ``ClusterConfig`` attribute,
found through the registry on first use: ``plugtrain.resolve("backend", "CSX").ClusterConfig``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cluster_config_class"]  # and ClusterConfig, resolved on access


def cluster_config_class() -> Any:
    """The ``ClusterConfig`` class of the installed ``CSX`` backend.

    :raises UnknownNameError: when no installed plugin provides a CSX backend.
    :raises BackendError: when the CSX backend has no ``ClusterConfig``.
    """
    from plugtrain.discovery.loading import get_registry
    from plugtrain.errors import BackendError

    backend = get_registry().resolve("backend", "CSX")
    found = getattr(backend, "ClusterConfig", None)
    if found is None:
        where = f"{backend.__module__}.{backend.__qualname__}"
        message = f"the CSX backend {where} has no ClusterConfig"
        raise BackendError(message)
    return found


def __getattr__(name: str) -> Any:
    if name == "ClusterConfig":
        return cluster_config_class()
    message = f"module 'plugtrain.distributed' has no attribute {name!r}"
    raise AttributeError(message)
