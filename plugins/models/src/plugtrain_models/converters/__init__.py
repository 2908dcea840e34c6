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
    ("gptj", "gptj:GPTJ", ()),
    ("gptj-headless", "gptj:GPTJ_HEADLESS", ()),
    ("gpt-neox", "gptj:GPT_NEOX", ()),
    ("gpt-neox-headless", "gptj:GPT_NEOX_HEADLESS", ()),
    ("falcon", "gptj:FALCON", ()),
    ("falcon-headless", "gptj:FALCON_HEADLESS", ()),
    ("bloom", "gptj:BLOOM", ()),
    ("bloom-headless", "gptj:BLOOM_HEADLESS", ()),
    # GPT-2-block families (gpt2.py); gpt3 files convert with the gpt2 rules
    ("gpt2", "gpt2:GPT2", ("gpt3",)),
    ("gpt2-headless", "gpt2:GPT2_HEADLESS", ("gpt3-headless",)),
    ("starcoder", "gpt2:STARCODER", ("octocoder", "wizardcoder", "sqlcoder")),
    ("starcoder-headless", "gpt2:STARCODER_HEADLESS",
     ("octocoder-headless", "wizardcoder-headless", "sqlcoder-headless")),
    ("santacoder", "gpt2:SANTACODER", ()),
    ("santacoder-headless", "gpt2:SANTACODER_HEADLESS", ()),
    ("jais", "gpt2:JAIS", ()),
    ("jais-headless", "gpt2:JAIS_HEADLESS", ()),
    ("btlm", "gpt2:BTLM", ()),
    ("btlm-headless", "gpt2:BTLM_HEADLESS", ()),
)  # fmt: skip
"""``(key, "module:DECLARATION" under this package, aliases)`` of every converter."""
