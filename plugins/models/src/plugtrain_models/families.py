"""The registered constructors: one per Model Zoo family name, all building :class:`DecoderLM`.

Each takes exactly its path's keys (the schema's fields, checked as a run file checks them)
and fixes ``parallel``: the GPT-J path for gptj, falcon and gpt-neox.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.model import DecoderLM
from plugtrain_models.schemas import GPT2_FAMILIES, GPTJ_FAMILIES, schema_for
from plugtrain_models.settings import resolve_settings

__all__ = ["FAMILIES", "build_decoder", "constructor"]


def build_decoder(family: str, arguments: dict[str, Any]) -> DecoderLM:
    """A decoder of ``family`` from its keys as written (validated, defaults filled in)."""
    schema = schema_for(family)
    complete = validated_arguments(schema, arguments, owner=family)
    settings = resolve_settings(complete, parallel=family in GPTJ_FAMILIES)
    return DecoderLM(settings, family, complete)


def constructor(family: str) -> Callable[..., DecoderLM]:
    """The function registered under ``family``: its signature is the schema's."""

    def build(**arguments: Any) -> DecoderLM:
        return build_decoder(family, arguments)

    build.__name__ = build.__qualname__ = family.replace("-", "_")
    build.__doc__ = f"Model Zoo's {family!r} decoder (see plugtrain_models.schemas)."
    build.__signature__ = constructor_signature(schema_for(family))  # type: ignore[attr-defined]
    return build


FAMILIES = (*GPT2_FAMILIES, *GPTJ_FAMILIES)
"""Every registered family name."""

gpt3, llama, jais, mixtral, starcoder, gemma2, btlm, mistral, bloom, santacoder, gpt2 = (
    constructor(name) for name in GPT2_FAMILIES
)
gptj, falcon, gpt_neox = (constructor(name) for name in GPTJ_FAMILIES)
