"""Hook implementations of acme-plugtrain-wsd; no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_wsd import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Register ``WSD``."""
    registry.register("WSD", "acme_plugtrain_wsd.wsd:WSD", schema=schemas.WSDArgs)
