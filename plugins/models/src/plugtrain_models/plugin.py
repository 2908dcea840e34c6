"""The hook implementations of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_models.gpt_schema import GPTArgs
from plugtrain_models.schemas import GPT2_FAMILIES, GPTJ_FAMILIES, schema_for

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's decoder families under their Model Zoo names, and ``GPT``."""
    for family in (*GPT2_FAMILIES, *GPTJ_FAMILIES):
        target = f"plugtrain_models.families:{family.replace('-', '_')}"
        registry.register(family, target, schema=schema_for(family))
    registry.register("GPT", "plugtrain_models.gpt:GPT", schema=GPTArgs)
