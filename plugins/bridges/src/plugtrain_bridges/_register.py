"""Registering one library's optimizers from the table (torch-free)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain_bridges import table
from plugtrain_bridges.libraries import library_named

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

__all__ = ["register_library"]

SCHEMA_SETS = {"torch": "torch_optim", "pytorch-optimizer": "pytorch_optimizer"}
"""Library -> the :mod:`plugtrain_bridges.schemas` attribute holding its schemas."""


def register_library(registry: ComponentRegistrar, name: str) -> None:
    """Register every optimizer of library ``name``, deferring to other plugins' names.

    When the library is not installed nothing is registered, and its names are declared
    :meth:`~plugtrain.registry.ComponentRegistrar.not_installed` instead.
    """
    library = library_named(name)
    optimizers = table.OPTIMIZERS.get(name, {})
    if not library.installed():
        registry.not_installed(optimizers, library.distribution)
        return
    schemas = SCHEMA_SETS[name]
    for optimizer, (target, summary, _arguments) in optimizers.items():
        registry.register(
            optimizer,
            target,
            schema=f"plugtrain_bridges.schemas:{schemas}.{optimizer}",
            summary=summary,
            defer=True,
        )
