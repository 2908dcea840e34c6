"""Text generation with plugtrain's own decoder: a KV cache, Model Zoo's sampling, stops.

:func:`generate` works on token ids (batched prompts of different lengths, left padded);
:func:`generate_text` on strings through a :class:`TextTokenizer`. ``plugtrain generate`` is
the command (:mod:`plugtrain_models.generation.command`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Sampling", "TextTokenizer", "generate", "generate_text", "load_text_tokenizer"]

if TYPE_CHECKING:
    from plugtrain_models.generation.decode import generate, generate_text
    from plugtrain_models.generation.sampling import Sampling
    from plugtrain_models.generation.text import TextTokenizer, load_text_tokenizer

_HOMES = {
    "generate": "decode",
    "generate_text": "decode",
    "Sampling": "sampling",
    "TextTokenizer": "text",
    "load_text_tokenizer": "text",
}


def __getattr__(name: str) -> Any:
    """Import the implementation (torch) only when one of its names is used."""
    if name not in _HOMES:
        raise AttributeError(name)
    import importlib

    module = importlib.import_module(f"plugtrain_models.generation.{_HOMES[name]}")
    return getattr(module, name)
