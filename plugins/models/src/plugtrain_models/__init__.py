"""plugtrain-models: Cerebras Model Zoo's decoder language models as plugtrain models.

The families (gpt3, llama, mistral, mixtral, gemma2, starcoder, santacoder, bloom, jais, btlm,
gpt2 on the GPT-2 path; gptj, falcon, gpt-neox on the GPT-J path) are registered by
:mod:`plugtrain_models.plugin`; importing this package imports no torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
