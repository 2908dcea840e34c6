"""What ``plugtrain check`` says of a ``Lora`` callback against its trainer's model (torch-free).

For a decoder of plugtrain-models the layers are known from the model's keys
(:mod:`.tree`): targets that match nothing (listing the class and module names there are), an
``r`` larger than a target's smaller side, and sparsity on the weights LoRA adapts are refused.
"""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from plugtrain.errors import PlugtrainError
from plugtrain.schema import Problem, about, validated_arguments
from plugtrain_models.lora.config import config_problems, lora_configs
from plugtrain_models.lora.targets import LayerInfo, choose

__all__ = ["lora_plan_problems"]

DENSE_WORDS = ("embedding", "norm", "lm_head", "pe_helper")
"""Words of parameter names that the default sparsity filter leaves dense (the core's rule)."""


def _decoder_layers(model: Any) -> list[LayerInfo] | None:
    from plugtrain_models.lora.tree import decoder_layers
    from plugtrain_models.schemas import GPT2_FAMILIES, GPTJ_FAMILIES, schema_for
    from plugtrain_models.settings import resolve_settings

    family = str(getattr(model, "name", ""))
    if family not in (*GPT2_FAMILIES, *GPTJ_FAMILIES):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            complete = validated_arguments(schema_for(family), model.arguments, owner=family)
            settings = resolve_settings(complete, parallel=family in GPTJ_FAMILIES)
    except (PlugtrainError, ValueError, TypeError, KeyError):
        return None  # the model's own check reports it
    return decoder_layers(settings)


def _sparse(weight: str, param_filter: Any) -> bool:
    if param_filter is None:
        return not any(word in weight.lower() for word in DENSE_WORDS)
    if callable(param_filter):
        return False  # a Python filter cannot be read here
    return any(fnmatch.fnmatchcase(weight, glob) for glob in param_filter)


def lora_plan_problems(arguments: Mapping[str, Any], trainer: Any) -> Iterator[Problem]:
    """The problems of a ``Lora`` callback in ``trainer`` (a ``TrainerPlan``)."""
    if config_problems(arguments.get("lora_params")):
        return  # the schema's cross_check reports those
    layers = _decoder_layers(trainer.model)
    if layers is None:
        return
    try:
        chosen = choose(layers, lora_configs(arguments["lora_params"]))
    except ValueError as exc:
        yield about("lora_params", str(exc))
        return
    adapted = [f"{name}.weight" for name, config in chosen.items() if config.r > 0]
    for group in getattr(trainer, "sparsity", ()):
        both = [w for w in adapted if _sparse(w, group.param_filter)]
        if both:
            shown = ", ".join(both[:3]) + (f" and {len(both) - 3} more" if len(both) > 3 else "")
            message = (
                f"LoRA adapts weights that sparsity ({group.algorithm}, {group.path}) also "
                f"prunes: {shown}; a frozen weight is never updated, so its mask would never "
                "change; exclude them from one or the other (param_filter or target_modules)"
            )
            yield about("lora_params", message)
