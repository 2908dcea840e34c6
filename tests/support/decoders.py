"""A tiny Model Zoo-keyed Llama decoder and token ids, as the generation and model tests build
them."""

from __future__ import annotations

from typing import Any

import torch

TINY_VOCAB = 96

LLAMA_LAYOUT = {
    "position_embedding_type": "rotary",
    "rotary_dim": 16,
    "norm_type": "rmsnorm",
    "nonlinearity": "swiglu",
    "attention_module": "multiquery_attention",
    "extra_attention_params": {"num_kv_groups": 2},
}
"""What makes a Model Zoo GPT-2-style decoder a Llama: rotary positions, RMSNorm, SwiGLU and
grouped-query attention (2 key/value groups)."""

TINY_LLAMA_KEYS = {
    "vocab_size": TINY_VOCAB,
    "hidden_size": 64,
    "num_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 48,
    "filter_size": 96,
    **LLAMA_LAYOUT,
}
"""A two-layer Llama of width 64, as Model Zoo model keys."""


def tiny_decoder(family: str = "llama", **keys: Any) -> Any:
    """``family``'s decoder of :data:`TINY_LLAMA_KEYS` updated with ``keys``, weights drawn
    from seed 0, in eval mode."""
    from plugtrain_models.families import build_decoder

    torch.manual_seed(0)
    return build_decoder(family, {**TINY_LLAMA_KEYS, **keys}).eval()


def token_ids(batch: int, length: int, vocab: int = TINY_VOCAB) -> torch.Tensor:
    """A ``[batch, length]`` tensor of token ids below ``vocab``, drawn from seed 5."""
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(5))


def tiny_lora_decoder() -> Any:
    """:func:`tiny_decoder` with LoRA (r 2, alpha 4) on its linear layers, each ``lora_B``
    drawn from N(0, 0.1) so that the adapters change the output."""
    from plugtrain_models.lora.apply import apply_lora
    from plugtrain_models.lora.config import LoraConfig

    model = tiny_decoder()
    apply_lora(model, [LoraConfig(r=2, alpha=4.0)])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("lora_B"):
                parameter.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(1))
    return model
