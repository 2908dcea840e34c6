"""Hook implementations of plugtrain-schedulers (entry point ``schedulers``); no torch import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_schedulers.schemas import LR_SCHEMAS, WD_SCHEMAS

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

# cstorch (and torch) call the chained scheduler ChainedScheduler.
_ALIASES = {"ChainedLR": ("ChainedScheduler",)}


@hookimpl
def plugtrain_register_schedulers(registry: ComponentRegistrar) -> None:
    """Register the 19 learning-rate schedulers and their 19 weight-decay twins."""
    for module, table in (("lr", LR_SCHEMAS), ("wd", WD_SCHEMAS)):
        for name, schema in table.items():
            registry.register(
                name,
                f"plugtrain_schedulers.{module}:{name}",
                schema=schema,
                aliases=_ALIASES.get(name, ()),
            )
