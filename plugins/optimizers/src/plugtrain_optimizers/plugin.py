"""Hook implementations of plugtrain-optimizers (entry point ``optimizers``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_optimizers import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register every optimizer of this distribution."""
    registry.register("SGD", "plugtrain_optimizers.sgd:SGD", schema=schemas.SGDArgs)
