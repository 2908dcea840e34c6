"""The run-file sections whose JSON Schema is more than their fields say.

``trainer`` (a mapping or a list), ``device``/``backend``, ``optimizer`` with the Trainer's
tagging keys, ``sparsity``, and the rules that span several keys of a section (one of
``max_steps``/``num_steps``/``num_epochs``, ``device`` or ``backend``, ``fit`` needs an
optimizer and a loop). Each function takes the schema builder of :mod:`.jsonschema`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from plugtrain.authoring.json_types import Schema, nullable, ref
from plugtrain.config.sections import (
    CheckpointSettings,
    InitSection,
    LoopSettings,
    RunFile,
    TrainerSection,
)
from plugtrain.config.validation.checker import OPTIMIZER_TRAINER_KEYS

__all__ = ["SECTION_RULES", "SPECIAL_ARGUMENTS", "add_tagging"]


def add_tagging(arguments: Schema, builder: Any) -> None:
    """The keys the Trainer takes from an optimizer's mapping: parameter tagging."""
    key = "optimizer.params-filter"
    if key not in builder.defs:
        glob = {"type": "string", "minLength": 1}
        builder.defs[key] = {
            "description": "Parameters whose names match the glob(s) get the tag.",
            "type": "object",
            "properties": {
                "params": {
                    "description": "a glob on parameter names, or a list of globs",
                    "anyOf": [glob, {"type": "array", "minItems": 1, "items": glob}],
                },
                "tag": {"description": "the tag of the matching param groups", **glob},
            },
            "required": ["params", "tag"],
            "additionalProperties": False,
        }
    params, exclude, factors = OPTIMIZER_TRAINER_KEYS
    arguments["properties"][params] = {
        "description": "parameter tagging: filters {params: GLOB or [GLOB...], tag: NAME}",
        "anyOf": [
            {"type": "array", "items": ref(key)},
            ref(key),
            {"type": "null"},
        ],
    }
    arguments["properties"][exclude] = {
        "description": "keep biases and norm weights out of weight decay",
        "type": "boolean",
        "default": True,
    }
    arguments["properties"][factors] = {
        "description": "per-layer learning-rate factors {name pattern or lr group: factor}",
        "type": "object",
        "additionalProperties": {"type": "number", "minimum": 0},
    }


def _given(*keys: str, types_: Mapping[str, str] | None = None) -> Schema:
    """Present and not null (``types_`` names the type each must then have)."""
    return {
        "required": list(keys),
        "properties": {k: {"type": (types_ or {}).get(k, "object")} for k in keys},
    }


def _trainer_value(builder: Any) -> Schema:
    trainer = builder.section(TrainerSection)
    return {
        "description": "one trainer, or a list of {trainer: ...} run in order",
        "anyOf": [
            trainer,
            {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"trainer": trainer},
                    "required": ["trainer"],
                    "additionalProperties": False,
                },
            },
        ],
    }


def _device_value(builder: Any) -> Schema:
    return nullable(builder.backend_name())


def _backend_value(builder: Any) -> Schema:
    return nullable(builder.backend_mapping())


def _optimizer_value(builder: Any) -> Schema:
    return nullable(builder.kind_ref("optimizer"))


def _sparsity_value(builder: Any) -> Schema:
    section: Schema = builder.sparsity_section()
    return section


def _legacy_sparsity_value(builder: Any) -> Schema:
    section: Schema = builder.sparsity_section(legacy=True)
    return section


SPECIAL_ARGUMENTS: dict[tuple[type, str], Callable[[Any], Schema]] = {
    (RunFile, "trainer"): _trainer_value,
    (InitSection, "device"): _device_value,
    (InitSection, "backend"): _backend_value,
    (InitSection, "optimizer"): _optimizer_value,
    (InitSection, "sparsity"): _sparsity_value,
    (RunFile, "sparsity"): _legacy_sparsity_value,
}
"""Arguments whose run-file form their annotation does not say."""


def _loop_rules(_builder: Any) -> list[Schema]:
    stops = ("max_steps", "num_steps", "num_epochs")
    return [{"anyOf": [_given(k, types_={k: "integer"}) for k in stops]}]


def _checkpoint_rules(_builder: Any) -> list[Schema]:
    return [
        {"properties": {"checkpoint_name": {"pattern": "^[^/{}\\x00]*\\{step\\}[^/{}\\x00]*$"}}}
    ]


def _init_rules(_builder: Any) -> list[Schema]:
    return [{"not": _given("device", "backend", types_={"device": "string"})}]


def _trainer_rules(_builder: Any) -> list[Schema]:
    return [
        {"anyOf": [_given("fit"), _given("validate"), _given("validate_all")]},
        {
            "if": _given("fit"),
            "then": {"properties": {"init": _given("optimizer", "loop")}},
        },
    ]


SECTION_RULES: dict[type, Callable[[Any], list[Schema]]] = {
    LoopSettings: _loop_rules,
    CheckpointSettings: _checkpoint_rules,
    InitSection: _init_rules,
    TrainerSection: _trainer_rules,
}
"""The sections' ``cross_check`` rules (and "fit needs an optimizer and a loop"), as schemas."""
