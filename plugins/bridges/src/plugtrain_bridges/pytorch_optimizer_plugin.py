"""The hook implementation of the ``pytorch-optimizer`` bridge: its optimizers by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_bridges._register import register_library

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register pytorch-optimizer's optimizers (``pytorch-optimizer:Lamb`` where taken)."""
    register_library(registry, "pytorch-optimizer")
