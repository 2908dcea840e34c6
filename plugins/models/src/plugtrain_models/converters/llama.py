"""Llama, Mistral, Mixtral and Gemma 2: transformers' ``*ForCausalLM`` as plugtrain's decoders.

Every block is Llama's: q/k/v/o projections (the rotary rows of q and k reordered per head from
rotate-half to interleaved pairs), RMSNorms, a gated MLP (Mixtral: experts, one tensor each on
disk). Gemma 2 adds sandwich norms stored as ``w`` for ``x * (1 + w)``, soft-capping, a query
scale and every other layer's sliding window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError, WeightRule
from plugtrain.conversion import headless as headless_variant
from plugtrain_models.converters.common import (
    LAYER,
    both,
    glu_activation,
    gqa_from_hf,
    gqa_to_hf,
    llama_attention_rules,
    llama_mlp_rules,
    rope_scaling_from_hf,
    rope_scaling_to_hf,
    whole_head_rotary,
)
from plugtrain_models.converters.transforms import PlusOne

__all__ = [
    "GEMMA2",
    "LLAMA",
    "LLAMA_HEADLESS",
    "MISTRAL",
    "MISTRAL_HEADLESS",
    "MIXTRAL",
    "MIXTRAL_HEADLESS",
]

_HF_LAYER = "model.layers.{layer}."

_LLAMA_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 32000),
    ConfigKey("hidden_size", "hidden_size", 4096),
    ConfigKey("num_hidden_layers", "num_hidden_layers", 32),
    ConfigKey("num_attention_heads", "num_heads", 32),
    ConfigKey("intermediate_size", "filter_size", 11008),
    glu_activation("hidden_act", "silu"),
    ConfigKey("max_position_embeddings", "max_position_embeddings", 2048),
    ConfigKey("rope_theta", "rope_theta", 10000.0),
    ConfigKey("rms_norm_eps", "layer_norm_epsilon", 1e-6),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", False),
    ConfigKey("initializer_range", "initializer_range", 0.02),
    ConfigKey("attention_dropout", "attention_dropout_rate", 0.0),
    ConfigKey("attention_bias", "use_projection_bias_in_attention", False),
    ConfigKey("mlp_bias", "use_ffn_bias", False),
)

_LLAMA_FIXED = {
    "position_embedding_type": "rotary",
    "norm_type": "rmsnorm",
    "embedding_layer_norm": False,
    "attention_type": "scaled_dot_product",
    "use_bias_in_output": False,
    "dropout_rate": 0.0,
    "embedding_dropout_rate": 0.0,
}

_LLAMA_IGNORED = frozenset({"num_key_value_heads", "rope_scaling", "head_dim", "pretraining_tp"})


def _head_dim_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    heads = int(hf.get("num_attention_heads", 32))
    head_dim = hf.get("head_dim") or int(hf.get("hidden_size", 4096)) // heads
    if head_dim * heads != int(keys["hidden_size"]):
        keys["attention_inner_dim"] = head_dim * heads
    factor = float(hf.get("partial_rotary_factor") or 1.0)
    keys["rotary_dim"] = int(head_dim * factor)
    keys["use_ffn_bias_in_attention"] = keys["use_projection_bias_in_attention"]


def _head_dim_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    whole_head_rotary(keys, hf)
    inner = keys.get("attention_inner_dim") or keys["hidden_size"]
    hf["head_dim"] = int(inner) // int(keys["num_heads"])
    if keys["use_ffn_bias_in_attention"] != keys["use_projection_bias_in_attention"]:
        message = (
            "model.use_ffn_bias_in_attention and use_projection_bias_in_attention differ: "
            f"Hugging Face {hf['architectures'][0]} has one attention_bias for all four"
        )
        raise ConversionError(message)


_LLAMA_HANDLED = frozenset({
    "attention_module", "extra_attention_params", "pos_scaling_type", "pos_scaling_factor",
    "pos_scaling_extra_args", "attention_inner_dim", "rotary_dim", "use_ffn_bias_in_attention",
})  # fmt: skip

_LLAMA_WEIGHTS = (
    WeightRule(["model.embed_tokens.weight"], ["embedding_layer.word_embeddings.weight"]),
    *llama_attention_rules(_HF_LAYER),
    WeightRule([_HF_LAYER + "input_layernorm.weight"], [LAYER + "norm1.weight"]),
    WeightRule([_HF_LAYER + "post_attention_layernorm.weight"], [LAYER + "norm3.weight"]),
    *llama_mlp_rules(_HF_LAYER),
    WeightRule(["model.norm.weight"], ["ln_f.weight"]),
    WeightRule(["lm_head.weight"], ["lm_head.weight"]),
    WeightRule(["model.rotary_emb.inv_freq"], []),
)

LLAMA = CheckpointConverter(
    model="llama",
    hf_model_types=["llama"],
    hf_architecture="LlamaForCausalLM",
    hf_prefix="model.",
    config=_LLAMA_CONFIG,
    weights=_LLAMA_WEIGHTS,
    plugtrain_fixed=_LLAMA_FIXED,
    hf_ignored=_LLAMA_IGNORED,
    config_to_plugtrain=both(gqa_from_hf(), rope_scaling_from_hf, _head_dim_from_hf),
    config_to_hf=both(gqa_to_hf(), rope_scaling_to_hf, _head_dim_to_hf),
    plugtrain_handled=_LLAMA_HANDLED,
    note="Llama 1-3 (LlamaForCausalLM); rotary rows of q and k reordered per head.",
)
LLAMA_HEADLESS = headless_variant(LLAMA, "LlamaModel")


def _window_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    window = hf.get("sliding_window")
    keys["attention_sliding_window_length"] = None if window is None else int(window)


def _window_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    hf["sliding_window"] = keys.get("attention_sliding_window_length")


MISTRAL = CheckpointConverter(
    model="mistral",
    hf_model_types=["mistral"],
    hf_architecture="MistralForCausalLM",
    hf_prefix="model.",
    config=_LLAMA_CONFIG,
    weights=_LLAMA_WEIGHTS,
    plugtrain_fixed=_LLAMA_FIXED,
    hf_ignored=_LLAMA_IGNORED | {"sliding_window"},
    config_to_plugtrain=both(
        gqa_from_hf(), rope_scaling_from_hf, _head_dim_from_hf, _window_from_hf
    ),
    config_to_hf=both(gqa_to_hf(), rope_scaling_to_hf, _head_dim_to_hf, _window_to_hf),
    plugtrain_handled=_LLAMA_HANDLED | {"attention_sliding_window_length"},
    note="Mistral (MistralForCausalLM): Llama with a sliding window.",
)
MISTRAL_HEADLESS = headless_variant(MISTRAL, "MistralModel")


def _moe_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    keys["moe"] = {
        "num_experts": int(hf.get("num_local_experts", 8)),
        "top_k": int(hf.get("num_experts_per_tok", 2)),
        "load_balancing_loss_coef": float(hf.get("router_aux_loss_coef", 0.001)),
    }


def _moe_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    moe = dict(keys.get("moe") or {})
    for key, default in (("num_shared_experts", 0), ("null_expert_bias", 0.0)):
        if moe.get(key) not in (None, default):
            message = f"model.moe.{key} = {moe[key]!r}: Hugging Face Mixtral has no such experts"
            raise ConversionError(message)
    hf["num_local_experts"] = int(moe.get("num_experts", 8))
    hf["num_experts_per_tok"] = int(moe.get("top_k", 1))
    hf["router_aux_loss_coef"] = float(moe.get("load_balancing_loss_coef", 0.01))


_EXPERT = "model.layers.{layer}.block_sparse_moe."
_OUR_EXPERT = LAYER + "ffn.experts.experts.{expert}."

MIXTRAL = CheckpointConverter(
    model="mixtral",
    hf_model_types=["mixtral"],
    hf_architecture="MixtralForCausalLM",
    hf_prefix="model.",
    config=_LLAMA_CONFIG,
    weights=(
        *(r for r in _LLAMA_WEIGHTS if "mlp." not in r.hf[0]),
        WeightRule([_EXPERT + "gate.weight"], [LAYER + "ffn.gate.weight"]),
        WeightRule(
            [_EXPERT + "experts.{expert}.w1.weight"],
            [_OUR_EXPERT + "0.linear_layer_for_glu.weight"],
        ),
        WeightRule(
            [_EXPERT + "experts.{expert}.w3.weight"], [_OUR_EXPERT + "0.linear_layer.weight"]
        ),
        WeightRule(
            [_EXPERT + "experts.{expert}.w2.weight"], [_OUR_EXPERT + "1.linear_layer.weight"]
        ),
    ),
    plugtrain_fixed=_LLAMA_FIXED,
    hf_required={"router_jitter_noise": 0.0},
    hf_ignored=_LLAMA_IGNORED
    | {
        "sliding_window",
        "num_local_experts",
        "num_experts_per_tok",
        "router_aux_loss_coef",
        "output_router_logits",
    },
    config_to_plugtrain=both(
        gqa_from_hf(), rope_scaling_from_hf, _head_dim_from_hf, _window_from_hf, _moe_from_hf
    ),
    config_to_hf=both(gqa_to_hf(), rope_scaling_to_hf, _head_dim_to_hf, _window_to_hf, _moe_to_hf),
    plugtrain_handled=_LLAMA_HANDLED | {"attention_sliding_window_length", "moe"},
    note="Mixtral (MixtralForCausalLM): one tensor per expert, as transformers saves them.",
)
MIXTRAL_HEADLESS = headless_variant(MIXTRAL, "MixtralModel")


def _gemma_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    head_dim = int(hf.get("head_dim", 256))
    scalar = float(hf.get("query_pre_attn_scalar", head_dim))
    if scalar != head_dim:
        keys["attention_logits_alpha"] = math.sqrt(head_dim / scalar)
    keys["embeddings_scale"] = float(keys["hidden_size"]) ** 0.5
    keys["use_ffn_bias_in_attention"] = keys["use_projection_bias_in_attention"]
    layer_types = hf.get("layer_types")
    if layer_types and layer_types[0] == "sliding_attention":
        keys["sliding_window_every_other_decoder_layer_pattern"] = "sliding_window_first"
    elif layer_types and any(
        t != ("full_attention" if i % 2 == 0 else "sliding_attention")
        for i, t in enumerate(layer_types)
    ):
        raise ConversionError(f"config.json: layer_types {layer_types} do not alternate")


def _gemma_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    head_dim = hf["head_dim"]
    alpha = float(keys.get("attention_logits_alpha") or 1.0)
    scalar = head_dim / alpha**2  # transformers wants an int, which alpha only nearly gives
    hf["query_pre_attn_scalar"] = round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar
    scale = float(keys.get("embeddings_scale") or 1.0)
    if not math.isclose(scale, float(keys["hidden_size"]) ** 0.5, rel_tol=1e-6):
        message = f"model.embeddings_scale = {scale}: Hugging Face Gemma 2 uses sqrt(hidden_size)"
        raise ConversionError(message)
    first = keys.get("sliding_window_every_other_decoder_layer_pattern") == "sliding_window_first"
    kinds = (
        ("sliding_attention", "full_attention")
        if first
        else ("full_attention", "sliding_attention")
    )
    hf["layer_types"] = [kinds[i % 2] for i in range(int(keys["num_hidden_layers"]))]


_GEMMA_NORMS = {
    "input_layernorm": "norm1",
    "post_attention_layernorm": "norm1_post",
    "pre_feedforward_layernorm": "norm3",
    "post_feedforward_layernorm": "norm3_post",
}

GEMMA2 = CheckpointConverter(
    model="gemma2",
    hf_model_types=["gemma2"],
    hf_architecture="Gemma2ForCausalLM",
    hf_prefix="model.",
    config=(
        *(c for c in _LLAMA_CONFIG if c.hf not in {"hidden_act", "tie_word_embeddings"}),
        glu_activation("hidden_activation", "gelu_pytorch_tanh"),
        ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
        ConfigKey("attn_logit_softcapping", "attention_logit_softcapping", 50.0),
        ConfigKey("final_logit_softcapping", "final_logit_softcapping", 30.0),
        ConfigKey("sliding_window", "attention_sliding_window_length", 4096),
    ),
    weights=(
        WeightRule(["model.embed_tokens.weight"], ["embedding_layer.word_embeddings.weight"]),
        *llama_attention_rules(_HF_LAYER),
        *(
            WeightRule([_HF_LAYER + f"{theirs}.weight"], [LAYER + f"{ours}.weight"], PlusOne())
            for theirs, ours in _GEMMA_NORMS.items()
        ),
        *llama_mlp_rules(_HF_LAYER),
        WeightRule(["model.norm.weight"], ["ln_f.weight"], PlusOne()),
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
        WeightRule(["model.rotary_emb.inv_freq"], []),
    ),
    plugtrain_fixed={
        **_LLAMA_FIXED,
        "norm_first_sandwich": True,
        "sliding_window_every_other_decoder_layer": True,
    },
    hf_ignored=_LLAMA_IGNORED
    | {"hidden_act", "query_pre_attn_scalar", "layer_types", "cache_implementation"},
    config_to_plugtrain=both(
        gqa_from_hf(), rope_scaling_from_hf, _head_dim_from_hf, _gemma_from_hf
    ),
    config_to_hf=both(gqa_to_hf(), rope_scaling_to_hf, _head_dim_to_hf, _gemma_to_hf),
    plugtrain_handled=_LLAMA_HANDLED
    | {
        "attention_logits_alpha",
        "embeddings_scale",
        "sliding_window_every_other_decoder_layer_pattern",
    },
    note="Gemma 2 (Gemma2ForCausalLM): norms hold 1 + w; tanh-GELU GLU (geglu_tanh).",
)
