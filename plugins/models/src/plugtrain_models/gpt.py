"""The registered ``GPT`` constructor: :class:`DecoderLM` configured by ``GPT``'s keys."""

from __future__ import annotations

from typing import Any

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.gpt_schema import GPTArgs, decoder_arguments
from plugtrain_models.model import DecoderLM
from plugtrain_models.schemas import Gpt2PathArgs
from plugtrain_models.settings import resolve_settings

__all__ = ["GPT"]


def GPT(**arguments: Any) -> DecoderLM:
    """A small GPT-2-style language model (keys: :class:`GPTArgs`).

    The decoder on the GPT-2 path, so its parameters carry Model Zoo's names and it computes
    Model Zoo's ``num_tokens`` loss over the labels that are not ``-100``.
    """
    complete = validated_arguments(GPTArgs, arguments, owner="GPT")
    keys = validated_arguments(Gpt2PathArgs, decoder_arguments(complete), owner="GPT")
    return DecoderLM(resolve_settings(keys, parallel=False), "GPT")


GPT.__signature__ = constructor_signature(GPTArgs)  # type: ignore[attr-defined]
