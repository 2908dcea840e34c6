"""Hook implementations of plugtrain-optimizers (entry point ``optimizers``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_optimizers import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

_M = "plugtrain_optimizers"


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register every optimizer of this distribution."""
    registry.register("Adadelta", f"{_M}.classic:Adadelta", schema=schemas.AdadeltaArgs)
    registry.register("Adafactor", f"{_M}.adafactor:Adafactor", schema=schemas.AdafactorArgs)
    registry.register("Adagrad", f"{_M}.classic:Adagrad", schema=schemas.AdagradArgs)
    registry.register("Adam", f"{_M}.adam:Adam", schema=schemas.AdamArgs)
    registry.register("AdamW", f"{_M}.adam:AdamW", schema=schemas.AdamWArgs)
    registry.register("Adamax", f"{_M}.adam_variants:Adamax", schema=schemas.AdamaxArgs)
    registry.register("ASGD", f"{_M}.classic:ASGD", schema=schemas.ASGDArgs)
    registry.register("Lamb", f"{_M}.lamb:Lamb", schema=schemas.LambArgs)
    registry.register("Lion", f"{_M}.lion:Lion", schema=schemas.LionArgs)
    registry.register("Muon", f"{_M}.muon:Muon", schema=schemas.MuonArgs)
    registry.register("NAdam", f"{_M}.adam_variants:NAdam", schema=schemas.NAdamArgs)
    registry.register("RAdam", f"{_M}.adam_variants:RAdam", schema=schemas.RAdamArgs)
    registry.register("RMSprop", f"{_M}.classic:RMSprop", schema=schemas.RMSpropArgs)
    registry.register("Rprop", f"{_M}.rprop:Rprop", schema=schemas.RpropArgs)
    registry.register("SGD", f"{_M}.sgd:SGD", schema=schemas.SGDArgs)
    registry.register(
        "AdamWScheduleFree",
        f"{_M}.schedule_free:AdamWScheduleFree",
        schema=schemas.AdamWScheduleFreeArgs,
    )
    registry.register(
        "SGDScheduleFree", f"{_M}.schedule_free:SGDScheduleFree", schema=schemas.SGDScheduleFreeArgs
    )
