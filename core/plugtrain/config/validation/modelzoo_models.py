"""Model Zoo's model names, for what a run file's ``model:`` section says about them.

Model Zoo writes a model as ``{name: gpt3, ...}`` (``model_name:`` before 2.0, deprecated).
A name that Model Zoo registers but no installed plugin provides is not a typo: the check
says that it has no plugtrain port yet instead of suggesting an unrelated name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from plugtrain.config.reading.yaml_loader import LocatedDict

__all__ = ["DEPRECATED_NAME_KEY", "MODEL_ZOO_MODELS", "no_port_message", "without_model_name"]

MODEL_ZOO_MODELS = (
    "llava", "multimodal_simple", "bert", "bert/classifier", "bert/extractive_summarization",
    "bert/token_classifier", "dpo", "dpr", "dpr/embedding_generation", "esm2/classification",
    "esm2", "gpt2", "gpt3", "gpt_backbone", "btlm", "bloom", "llama", "mistral", "mixtral",
    "santacoder", "starcoder", "jais", "gemma2", "gptj", "falcon", "gpt-neox", "t5",
    "transformer", "dit", "fc_mnist", "generic_image_encoders", "dino", "vision_transformer",
)  # fmt: skip
"""The model names of Model Zoo 2.10's registry (``registry/registry.yaml``), in its order."""

DEPRECATED_NAME_KEY = "model_name"
"""Model Zoo's deprecated spelling of a model's ``name`` key."""


def no_port_message(name: str, installed: Iterable[str]) -> str | None:
    """What to say about ``name`` when it is Model Zoo's and not installed, else ``None``."""
    if name not in MODEL_ZOO_MODELS:
        return None
    names = ", ".join(sorted(installed, key=str.lower)) or "none"
    return f"Model Zoo's {name!r} has no plugtrain port yet; installed models: {names}"


def without_model_name(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec`` with ``model_name: X`` written as ``name: X``; ``None`` if it has no such key.

    Only a string ``model_name`` beside no ``name`` is respelt; positions are kept.
    """
    if not isinstance(spec.get(DEPRECATED_NAME_KEY), str) or "name" in spec:
        return None
    respelt = LocatedDict()
    respelt.mark = getattr(spec, "mark", None)
    key_marks, value_marks = getattr(spec, "key_marks", {}), getattr(spec, "value_marks", {})
    for key, value in spec.items():
        new_key = "name" if key == DEPRECATED_NAME_KEY else key
        respelt[new_key] = value
        if key in key_marks:
            respelt.key_marks[new_key] = key_marks[key]
        if key in value_marks:
            respelt.value_marks[new_key] = value_marks[key]
    return respelt
