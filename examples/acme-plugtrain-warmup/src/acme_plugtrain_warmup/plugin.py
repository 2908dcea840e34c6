"""Hook implementations of acme-plugtrain-warmup (entry point ``warmup``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_warmup import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Register ``LinearWarmupLR`` and ``HalvingLR``."""
    registry.register(
        "LinearWarmupLR",
        "acme_plugtrain_warmup.warmup:LinearWarmupLR",
        schema=schemas.LinearWarmupLRArgs,
    )
    registry.register(
        "HalvingLR", "acme_plugtrain_warmup.halving:HalvingLR", schema=schemas.HalvingLRArgs
    )
