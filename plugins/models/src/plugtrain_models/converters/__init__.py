"""Checkpoint converters of Model Zoo's decoder families (Hugging Face <-> plugtrain).

:data:`CONVERTERS` lists each converter's key (Model Zoo's), its declaration and its aliases;
``plugtrain_models.plugin`` registers them. Importing this package imports no torch.
"""

from __future__ import annotations

__all__ = ["CONVERTERS"]

CONVERTERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("llama", "llama:LLAMA", ("llamaV2", "code-llama", "wizardlm")),
    ("llama-headless", "llama:LLAMA_HEADLESS",
     ("llamaV2-headless", "code-llama-headless", "wizardlm-headless")),
    ("mistral", "llama:MISTRAL", ()),
    ("mistral-headless", "llama:MISTRAL_HEADLESS", ()),
    ("mixtral", "llama:MIXTRAL", ()),
    ("mixtral-headless", "llama:MIXTRAL_HEADLESS", ()),
    ("gemma2", "llama:GEMMA2", ()),
)  # fmt: skip
"""``(key, "module:DECLARATION" under this package, aliases)`` of every converter."""
