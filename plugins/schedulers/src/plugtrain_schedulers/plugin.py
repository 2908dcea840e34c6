"""Hook implementations of plugtrain-schedulers (entry point ``schedulers``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_schedulers import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Register every scheduler of this distribution."""
    registry.register("LinearLR", "plugtrain_schedulers.lr:LinearLR", schema=schemas.LinearLRArgs)
