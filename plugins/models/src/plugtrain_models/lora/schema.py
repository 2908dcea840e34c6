"""The ``Lora`` callback's argument schema (torch-free): Model Zoo's ``lora_params``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_models.lora.config import config_problems

__all__ = ["LoraArgs"]


@attrs.frozen
class LoraArgs:
    """LoRA fine-tuning: low-rank adapters on Linear and Embedding layers, the rest frozen."""

    lora_params: dict[str, Any] | list[dict[str, Any]] = arg(
        help="Model Zoo's LoraConfig keys (r, alpha, dropout, fan_in_fan_out, merge_weights, "
        "target_modules), or a list of such groups (first match wins)"
    )
    adapter_only_checkpoints: bool = arg(
        False, help="checkpoints hold the adapters and a reference to the base weights only"
    )

    @staticmethod
    def plan_problems(arguments: Mapping[str, Any], trainer: Any) -> Iterator[Problem]:
        """Targets the trainer's model has, ``r`` within them, no sparsity on the same weights."""
        from plugtrain_models.lora.plan_check import lora_plan_problems

        yield from lora_plan_problems(arguments, trainer)

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """Known keys of the right types in every group; some group with ``r`` above 0."""
        for problem in config_problems(arguments["lora_params"]):
            yield about("lora_params", problem)
