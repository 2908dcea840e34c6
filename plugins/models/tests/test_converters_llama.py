"""Llama, Mistral, Mixtral and Gemma 2 converters against transformers (tiny local models)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import transformers
from support.hf_models import assert_converts_both_ways, random_hf_model, save_hf

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 5e5,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,
}
CASES = {
    "llama-llama3-rope": (
        transformers.LlamaConfig, transformers.LlamaForCausalLM,
        {**LLAMA, "rope_parameters": LLAMA3_ROPE},
    ),
    "llama-tied-attention-bias": (
        transformers.LlamaConfig, transformers.LlamaForCausalLM,
        {**LLAMA, "tie_word_embeddings": True, "attention_bias": True, "num_key_value_heads": 4},
    ),
    "mistral-window": (
        transformers.MistralConfig, transformers.MistralForCausalLM,
        {**LLAMA, "sliding_window": 8,
         "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
    ),
    "mixtral": (
        transformers.MixtralConfig, transformers.MixtralForCausalLM,
        {**LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "gemma2": (
        transformers.Gemma2Config, transformers.Gemma2ForCausalLM,
        {**LLAMA, "head_dim": 32, "query_pre_attn_scalar": 24, "sliding_window": 8,
         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
         "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
         "tie_word_embeddings": True},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_family_converts_both_ways_with_transformers_logits(case: str, tmp_path: Path) -> None:
    config_class, model_class, config = CASES[case]
    hf = random_hf_model(config_class, model_class, **config)
    folder = save_hf(hf, tmp_path / case)
    measured = assert_converts_both_ways(hf, folder)
    if case == "gemma2":
        # 1 + w is rounded once each way: a round trip is exact where w and 1 + w share an
        # exponent, which N(0, 0.2) + 1 norm weights mostly do; the others move by one ulp.
        model = measured["model"]
        for name in measured["changed_on_round_trip"]:
            assert "norm" in name or "ln_f" in name, name
            original = model.state_dict()[name]
            assert original.dtype == torch.float32
    else:
        assert measured["changed_on_round_trip"] == []
