"""Hook implementations of acme-plugtrain-callbacks (entry point ``acme_callbacks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_callbacks import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register ``LossEMA``."""
    registry.register("LossEMA", "acme_plugtrain_callbacks.ema:LossEMA", schema=schemas.LossEMAArgs)


@hookimpl
def plugtrain_register_loggers(registry: ComponentRegistrar) -> None:
    """Register ``StdoutLogger``."""
    registry.register(
        "StdoutLogger",
        "acme_plugtrain_callbacks.stdout:StdoutLogger",
        schema=schemas.StdoutLoggerArgs,
    )
