"""The hook implementation of the ``torch`` bridge: ``torch.optim``'s optimizers by name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_bridges._register import register_library

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register ``torch.optim``'s optimizers (``torch:Adamax`` where a plugin has the name)."""
    register_library(registry, "torch")
