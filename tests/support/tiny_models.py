"""The tiny model shapes several test modules build, without importing torch."""

from __future__ import annotations

TINY_LLAMA_SHAPE = {
    "vocab_size": 257,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
}
"""A two-layer Llama with grouped-query attention and a byte-level vocabulary (256 + EOS):
keyword arguments of ``transformers.LlamaConfig``."""

TINY_LLAMA_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    **TINY_LLAMA_SHAPE,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
}
"""The same Llama as a Hugging Face ``config.json``'s contents."""
