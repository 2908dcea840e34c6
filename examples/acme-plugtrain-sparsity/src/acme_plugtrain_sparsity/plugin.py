"""Hook implementations of acme-plugtrain-sparsity (entry point ``acme_sparsity``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_sparsity import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_sparsity(registry: ComponentRegistrar) -> None:
    """Register ``RandomPrune``."""
    registry.register(
        "RandomPrune",
        "acme_plugtrain_sparsity.prune:RandomPrune",
        schema=schemas.RandomPruneArgs,
    )
