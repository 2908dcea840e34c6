"""The hook implementations of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_models.evaluation.schemas import BigCodeEvalHarnessArgs, EleutherEvalHarnessArgs
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


@hookimpl
def plugtrain_register_callbacks(registry: ComponentRegistrar) -> None:
    """Register the downstream-evaluation callbacks and ``Lora`` (Model Zoo's names)."""
    harness = "plugtrain_models.evaluation.harness:EleutherEvalHarness"
    registry.register("EleutherEvalHarness", harness, schema=EleutherEvalHarnessArgs)
    bigcode = "plugtrain_models.evaluation.bigcode:BigCodeEvalHarness"
    registry.register("BigCodeEvalHarness", bigcode, schema=BigCodeEvalHarnessArgs)
    lora = "plugtrain_models.lora.callback:Lora"
    registry.register("Lora", lora, schema="plugtrain_models.lora.schema:LoraArgs")


@hookimpl
def plugtrain_register_checkpoint_converters(registry: ComponentRegistrar) -> None:
    """Register the Hugging Face converters of the decoder families under Model Zoo's keys."""
    from plugtrain.conversion.declaration import ConverterArguments
    from plugtrain_models.converters import CONVERTERS

    for key, target, aliases in CONVERTERS:
        module, attribute = target.split(":")
        registry.register(
            key,
            f"plugtrain_models.converters.{module}:{attribute}",
            schema=ConverterArguments,
            aliases=aliases,
            summary=f"Hugging Face <-> plugtrain checkpoints of {key.removesuffix('-headless')}"
            + (" (base model, no head)" if key.endswith("-headless") else ""),
        )
