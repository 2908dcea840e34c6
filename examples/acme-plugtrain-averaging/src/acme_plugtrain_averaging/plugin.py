"""Hook implementations of acme-plugtrain-averaging (entry point ``acme_averaging``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_averaging import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

_M = "acme_plugtrain_averaging"


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register ``ScheduleFreeSGD``."""
    registry.register(
        "ScheduleFreeSGD", f"{_M}.sf:ScheduleFreeSGD", schema=schemas.ScheduleFreeSGDArgs
    )


@hookimpl
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Register ``RampWD``."""
    registry.register("RampWD", f"{_M}.wd:RampWD", schema=schemas.RampWDArgs)


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register ``WeightEMA``."""
    registry.register("WeightEMA", f"{_M}.ema:WeightEMA", schema=schemas.WeightEMAArgs)
