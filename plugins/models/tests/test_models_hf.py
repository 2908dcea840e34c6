"""Logits equal Hugging Face ``transformers`` for each family with an HF class (SPEC-models 6.1).

Each test builds a tiny HF model, overwrites every parameter with N(0, 0.2) (norm weights + 1,
so that a wrong GELU or norm shows), maps the weights to Model Zoo's names as SPEC-models
section 3 says, and compares ``logits(input_ids)`` in float32, eval mode, eager attention.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from support.decoders import LLAMA_LAYOUT
from support.hf_models import random_hf_model

from plugtrain_models.families import build_decoder

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

V, H, NH, L, P = 128, 64, 4, 2, 64
SHARED = {
    "vocab_size": V,
    "hidden_size": H,
    "num_heads": NH,
    "num_hidden_layers": L,
    "max_position_embeddings": P,
}
LLAMA_KEYS = {
    **SHARED,
    "filter_size": 96,
    **LLAMA_LAYOUT,
    "use_ffn_bias": False,
    "use_projection_bias_in_attention": False,
    "use_ffn_bias_in_attention": False,
    "share_embedding_weights": False,
}
ATOL, RTOL = 1e-4, 1e-5
Weights = dict[str, torch.Tensor]


def _ids() -> torch.Tensor:
    return torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(1))


def _hf(config_class: Any, model_class: Any, **config: Any) -> Any:
    """A tiny HF model with every parameter N(0, 0.2), norm weights + 1, in eval mode."""
    return random_hf_model(config_class, model_class, **config)


def _ours(family: str, weights: Weights, **keys: Any) -> Any:
    """Our decoder with every trainable parameter set from ``weights`` (each used once)."""
    model = build_decoder(family, keys).eval()
    parameters = dict(model.named_parameters())
    trainable = {n for n, p in parameters.items() if p.requires_grad}
    assert set(weights) == trainable, set(weights) ^ trainable
    with torch.no_grad():
        for name, tensor in weights.items():
            parameters[name].copy_(tensor)
    return model


def _rope_rows(weight: torch.Tensor, heads: int, rotary: int) -> torch.Tensor:
    """SPEC-models 3's permutation R: interleave each head's two rotary halves."""
    shaped = weight.reshape(heads, -1, *weight.shape[1:])
    out = shaped.clone()
    half = rotary // 2
    out[:, 0:rotary:2] = shaped[:, :half]
    out[:, 1:rotary:2] = shaped[:, half:rotary]
    return out.reshape(weight.shape)


def _layer(n: int) -> str:
    return f"model.transformer_decoder.layers.{n}."


def _compare(ours: Any, reference: torch.Tensor, ids: torch.Tensor) -> float:
    with torch.no_grad():
        logits = ours.logits(ids)
    torch.testing.assert_close(logits, reference, atol=ATOL, rtol=RTOL)
    return float((logits - reference).abs().max())


# ----------------------------------------------------------------------------- GPT-2, gpt3


def _gpt2_weights(hf: Any) -> Weights:
    sd = hf.state_dict()
    out = {
        "model.embedding_layer.word_embeddings.weight": sd["transformer.wte.weight"],
        "model.embedding_layer.position_embeddings.embed.weight": sd["transformer.wpe.weight"],
        "model.ln_f.weight": sd["transformer.ln_f.weight"],
        "model.ln_f.bias": sd["transformer.ln_f.bias"],
    }
    for n in range(L):
        h, o = f"transformer.h.{n}.", _layer(n)
        qkv_w = sd[h + "attn.c_attn.weight"].t().chunk(3, dim=0)
        qkv_b = sd[h + "attn.c_attn.bias"].chunk(3, dim=0)
        for index, part in enumerate("qkv"):
            out[o + f"self_attn.proj_{part}_dense_layer.weight"] = qkv_w[index]
            out[o + f"self_attn.proj_{part}_dense_layer.bias"] = qkv_b[index]
        pairs = {
            "attn.c_proj": "self_attn.proj_output_dense_layer",
            "mlp.c_fc": "ffn.ffn.0.linear_layer",
            "mlp.c_proj": "ffn.ffn.1.linear_layer",
        }
        for theirs, mine in pairs.items():
            out[o + mine + ".weight"] = sd[h + theirs + ".weight"].t()
            out[o + mine + ".bias"] = sd[h + theirs + ".bias"]
        for theirs, mine in (("ln_1", "norm1"), ("ln_2", "norm3")):
            out[o + mine + ".weight"] = sd[h + theirs + ".weight"]
            out[o + mine + ".bias"] = sd[h + theirs + ".bias"]
    return out


GPT2_CONFIG = {
    "vocab_size": V,
    "n_embd": H,
    "n_layer": L,
    "n_head": NH,
    "n_positions": P,
    "n_inner": 256,
    "activation_function": "gelu",
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def test_gpt3_logits_equal_hf_gpt2() -> None:
    hf = _hf(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2_CONFIG)
    ours = _ours("gpt3", _gpt2_weights(hf), **SHARED, filter_size=256)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


def test_gpt3_mup_logits_equal_hf_gpt2_with_the_scales_folded_in() -> None:
    hf = _hf(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2_CONFIG)
    scale, alpha, head_dim = 10.0, 2.0, H // NH
    keys = {
        "embeddings_scale": scale,
        "scale_qk_dot_by_d": True,
        "attention_logits_alpha": alpha,
        "output_logits_scale": 0.25,
    }
    ours = _ours("gpt3", _gpt2_weights(hf), **SHARED, filter_size=256, **keys)
    ids = _ids()
    with torch.no_grad():
        hf.transformer.wpe.weight.mul_(scale)
        for block in hf.transformer.h:
            block.attn.c_attn.weight[:, :H].mul_(alpha / math.sqrt(head_dim))
            block.attn.c_attn.bias[:H].mul_(alpha / math.sqrt(head_dim))
        embeds = scale * hf.transformer.wte.weight[ids]
        reference = hf(inputs_embeds=embeds).logits * 0.25
    _compare(ours, reference, ids)


# ------------------------------------------------------------ Llama, Mistral, Mixtral, Gemma2


def _llama_weights(
    hf: Any, heads: int, groups: int, rotary: int, norm_shift: float = 0.0
) -> Weights:
    sd = hf.state_dict()
    out = {
        "model.embedding_layer.word_embeddings.weight": sd["model.embed_tokens.weight"],
        "model.ln_f.weight": sd["model.norm.weight"] + norm_shift,
    }
    if "lm_head.weight" in sd and not hf.config.tie_word_embeddings:
        out["model.lm_head.weight"] = sd["lm_head.weight"]
    for n in range(L):
        h, o = f"model.layers.{n}.", _layer(n)
        a = h + "self_attn."
        out[o + "self_attn.proj_q_dense_layer.weight"] = _rope_rows(
            sd[a + "q_proj.weight"], heads, rotary
        )
        out[o + "self_attn.proj_k_dense_layer.weight"] = _rope_rows(
            sd[a + "k_proj.weight"], groups, rotary
        )
        out[o + "self_attn.proj_v_dense_layer.weight"] = sd[a + "v_proj.weight"]
        out[o + "self_attn.proj_output_dense_layer.weight"] = sd[a + "o_proj.weight"]
        if h + "mlp.gate_proj.weight" in sd:
            out[o + "ffn.ffn.0.linear_layer_for_glu.weight"] = sd[h + "mlp.gate_proj.weight"]
            out[o + "ffn.ffn.0.linear_layer.weight"] = sd[h + "mlp.up_proj.weight"]
            out[o + "ffn.ffn.1.linear_layer.weight"] = sd[h + "mlp.down_proj.weight"]
        if h + "mlp.gate.weight" in sd:
            out[o + "ffn.gate.weight"] = sd[h + "mlp.gate.weight"]
            gate_up, down = sd[h + "mlp.experts.gate_up_proj"], sd[h + "mlp.experts.down_proj"]
            width = gate_up.shape[1] // 2
            for e in range(gate_up.shape[0]):
                x = o + f"ffn.experts.experts.{e}."
                out[x + "0.linear_layer_for_glu.weight"] = gate_up[e, :width]
                out[x + "0.linear_layer.weight"] = gate_up[e, width:]
                out[x + "1.linear_layer.weight"] = down[e]
        norms = {
            "input_layernorm": "norm1",
            "post_attention_layernorm": "norm1_post" if norm_shift else "norm3",
            "pre_feedforward_layernorm": "norm3",
            "post_feedforward_layernorm": "norm3_post",
        }
        for theirs, mine in norms.items():
            if h + theirs + ".weight" in sd:
                out[o + mine + ".weight"] = sd[h + theirs + ".weight"] + norm_shift
    return out


LLAMA_CONFIG = {
    "vocab_size": V,
    "hidden_size": H,
    "intermediate_size": 96,
    "num_hidden_layers": L,
    "num_attention_heads": NH,
    "num_key_value_heads": 2,
    "max_position_embeddings": P,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def test_llama_logits_equal_hf_llama_with_llama3_rope_scaling() -> None:
    rope = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8,
    }
    hf = _hf(
        transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA_CONFIG,
        rope_parameters=rope,
    )  # fmt: skip
    extra = {"low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8}
    keys = {
        **LLAMA_KEYS,
        "rope_theta": 5e5,
        "pos_scaling_type": "llama3",
        "pos_scaling_factor": 8.0,
        "pos_scaling_extra_args": extra,
    }
    ours = _ours("llama", _llama_weights(hf, NH, 2, 16), **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


def test_mistral_logits_equal_hf_mistral_with_a_sliding_window() -> None:
    rope = {"rope_type": "default", "rope_theta": 1e6}
    hf = _hf(
        transformers.MistralConfig, transformers.MistralForCausalLM, **LLAMA_CONFIG,
        sliding_window=8, rope_parameters=rope,
    )  # fmt: skip
    keys = {**LLAMA_KEYS, "rope_theta": 1e6, "attention_sliding_window_length": 8}
    ours = _ours("mistral", _llama_weights(hf, NH, 2, 16), **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)
    without_window = _ours("mistral", _llama_weights(hf, NH, 2, 16), **LLAMA_KEYS, rope_theta=1e6)
    with torch.no_grad():
        assert (without_window.logits(ids) - reference).abs().max() > 1e-2  # the window matters


def test_mixtral_logits_equal_hf_mixtral() -> None:
    rope = {"rope_type": "default", "rope_theta": 1e6}
    hf = _hf(
        transformers.MixtralConfig, transformers.MixtralForCausalLM, **LLAMA_CONFIG,
        num_local_experts=4, num_experts_per_tok=2, rope_parameters=rope,
    )  # fmt: skip
    keys = {**LLAMA_KEYS, "rope_theta": 1e6, "moe": {"num_experts": 4, "top_k": 2}}
    ours = _ours("mixtral", _llama_weights(hf, NH, 2, 16), **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


GEMMA2_CONFIG = {
    **LLAMA_CONFIG,
    "head_dim": 32,
    "query_pre_attn_scalar": 24,
    "sliding_window": 8,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu",
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
GEMMA2_KEYS = {
    **LLAMA_KEYS,
    "attention_inner_dim": 128,
    "rotary_dim": 32,
    "attention_logits_alpha": math.sqrt(32 / 24),
    "norm_first_sandwich": True,
    "nonlinearity": "geglu",
    "embeddings_scale": 8.0,
    "attention_sliding_window_length": 8,
    "sliding_window_every_other_decoder_layer": True,
    "attention_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "layer_norm_epsilon": 1e-6,
    "share_embedding_weights": True,
}


def _gemma2(layer_types: list[str] | None) -> tuple[Any, torch.Tensor]:
    config = dict(GEMMA2_CONFIG)
    if layer_types is not None:
        config["layer_types"] = layer_types
    hf = _hf(transformers.Gemma2Config, transformers.Gemma2ForCausalLM, **config)
    with torch.no_grad():
        reference = hf(_ids()).logits
    return hf, reference


def test_gemma2_logits_equal_hf_gemma2_with_model_zoos_layer_pattern() -> None:
    hf, reference = _gemma2(["full_attention", "sliding_attention"])
    ours = _ours("gemma2", _llama_weights(hf, NH, 2, 32, norm_shift=1.0), **GEMMA2_KEYS)
    _compare(ours, reference, _ids())


def test_gemma2_hf_default_layer_types_are_model_zoos_sliding_window_first() -> None:
    hf, reference = _gemma2(None)
    weights = _llama_weights(hf, NH, 2, 32, norm_shift=1.0)
    pattern = "sliding_window_every_other_decoder_layer_pattern"
    flipped = _ours("gemma2", weights, **GEMMA2_KEYS, **{pattern: "sliding_window_first"})
    _compare(flipped, reference, _ids())
    model_zoo_default = _ours("gemma2", weights, **GEMMA2_KEYS)
    with torch.no_grad():
        assert (model_zoo_default.logits(_ids()) - reference).abs().max() > 1.0


# ------------------------------------------------------------------------------------ GPT-J


def test_gptj_logits_equal_hf_gptj() -> None:
    hf = _hf(
        transformers.GPTJConfig, transformers.GPTJForCausalLM, vocab_size=V, n_embd=H,
        n_layer=L, n_head=NH, rotary_dim=8, n_inner=96, n_positions=P,
        activation_function="gelu", tie_word_embeddings=False, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    sd = hf.state_dict()
    weights = {
        "model.embedding_layer.word_embeddings.weight": sd["transformer.wte.weight"],
        "model.ln_f.weight": sd["transformer.ln_f.weight"],
        "model.ln_f.bias": sd["transformer.ln_f.bias"],
        "model.lm_head.weight": sd["lm_head.weight"],
        "model.lm_head.bias": sd["lm_head.bias"],
    }
    for n in range(L):
        h, o = f"transformer.h.{n}.", _layer(n)
        for part in "qkv":
            weights[o + f"self_attn.proj_{part}_dense_layer.weight"] = sd[
                h + f"attn.{part}_proj.weight"
            ]
        weights[o + "self_attn.proj_output_dense_layer.weight"] = sd[h + "attn.out_proj.weight"]
        for theirs, mine in (
            ("mlp.fc_in", "ffn.ffn.0.linear_layer"),
            ("mlp.fc_out", "ffn.ffn.1.linear_layer"),
            ("ln_1", "norm1"),
        ):
            weights[o + mine + ".weight"] = sd[h + theirs + ".weight"]
            weights[o + mine + ".bias"] = sd[h + theirs + ".bias"]
    keys = {
        **SHARED,
        "filter_size": 96,
        "rotary_dim": 8,
        "use_bias_in_output": True,
        "share_embedding_weights": False,
        "use_ffn_bias": True,
        "use_projection_bias_in_attention": False,
        "use_ffn_bias_in_attention": False,
    }
    ours = _ours("gptj", weights, **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


def _falcon_weights(hf: Any, groups: int, untied: bool) -> Weights:
    sd = hf.state_dict()
    d = H // NH
    weights = {
        "model.embedding_layer.word_embeddings.weight": sd["transformer.word_embeddings.weight"],
        "model.ln_f.weight": sd["transformer.ln_f.weight"],
        "model.ln_f.bias": sd["transformer.ln_f.bias"],
    }
    for n in range(L):
        h, o = f"transformer.h.{n}.", _layer(n)
        fused = sd[h + "self_attention.query_key_value.weight"]
        if groups == 1:
            q, k, v = fused[:H], fused[H : H + d], fused[H + d :]
        else:
            shaped = fused.view(groups, NH // groups + 2, d, H)
            q = shaped[:, :-2].reshape(-1, H)
            k, v = shaped[:, -2].reshape(-1, H), shaped[:, -1].reshape(-1, H)
        weights[o + "self_attn.proj_q_dense_layer.weight"] = _rope_rows(q, NH, d)
        weights[o + "self_attn.proj_k_dense_layer.weight"] = _rope_rows(k, groups, d)
        weights[o + "self_attn.proj_v_dense_layer.weight"] = v
        weights[o + "self_attn.proj_output_dense_layer.weight"] = sd[
            h + "self_attention.dense.weight"
        ]
        weights[o + "ffn.ffn.0.linear_layer.weight"] = sd[h + "mlp.dense_h_to_4h.weight"]
        weights[o + "ffn.ffn.1.linear_layer.weight"] = sd[h + "mlp.dense_4h_to_h.weight"]
        norms = (
            (("ln_attn", "norm1"), ("ln_mlp", "norm3"))
            if untied
            else (("input_layernorm", "norm1"),)
        )
        for theirs, mine in norms:
            weights[o + mine + ".weight"] = sd[h + theirs + ".weight"]
            weights[o + mine + ".bias"] = sd[h + theirs + ".bias"]
    return weights


@pytest.mark.parametrize("groups", [1, 2], ids=["7b-multi-query", "40b-new-architecture"])
def test_falcon_logits_equal_hf_falcon(groups: int) -> None:
    architecture = (
        {"multi_query": True, "new_decoder_architecture": False}
        if groups == 1
        else {"new_decoder_architecture": True, "num_kv_heads": groups}
    )
    hf = _hf(
        transformers.FalconConfig, transformers.FalconForCausalLM, vocab_size=V, hidden_size=H,
        num_hidden_layers=L, num_attention_heads=NH, parallel_attn=True, bias=False,
        alibi=False, ffn_hidden_size=96, activation="gelu", max_position_embeddings=P,
        **architecture,
    )  # fmt: skip
    keys = {
        **SHARED,
        "filter_size": 96,
        "rotary_dim": 16,
        "attention_module": "multiquery_attention",
        "extra_attention_params": {"num_kv_groups": groups},
        "use_projection_bias_in_attention": False,
        "use_ffn_bias_in_attention": False,
        "use_untied_layer_norm": groups > 1,
    }
    ours = _ours("falcon", _falcon_weights(hf, groups, untied=groups > 1), **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


# ------------------------------------------------------------------------- Bloom, BigCode


def test_bloom_logits_equal_hf_bloom_with_the_exact_gelu() -> None:
    hf = _hf(
        transformers.BloomConfig, transformers.BloomForCausalLM, vocab_size=V, hidden_size=H,
        n_layer=L, n_head=NH, layer_norm_epsilon=1e-5,
    )  # fmt: skip
    for block in hf.transformer.h:
        block.mlp.gelu_impl = torch.nn.GELU()
    sd = hf.state_dict()
    d = H // NH
    weights = {
        "model.embedding_layer.word_embeddings.weight": sd["transformer.word_embeddings.weight"],
        "model.embedding_ln_f.weight": sd["transformer.word_embeddings_layernorm.weight"],
        "model.embedding_ln_f.bias": sd["transformer.word_embeddings_layernorm.bias"],
        "model.ln_f.weight": sd["transformer.ln_f.weight"],
        "model.ln_f.bias": sd["transformer.ln_f.bias"],
    }
    for n in range(L):
        h, o = f"transformer.h.{n}.", _layer(n)
        fused_w = sd[h + "self_attention.query_key_value.weight"].view(NH, 3, d, H)
        fused_b = sd[h + "self_attention.query_key_value.bias"].view(NH, 3, d)
        for index, part in enumerate("qkv"):
            weights[o + f"self_attn.proj_{part}_dense_layer.weight"] = fused_w[:, index].reshape(
                H, H
            )
            weights[o + f"self_attn.proj_{part}_dense_layer.bias"] = fused_b[:, index].reshape(H)
        pairs = {
            "self_attention.dense": "self_attn.proj_output_dense_layer",
            "mlp.dense_h_to_4h": "ffn.ffn.0.linear_layer",
            "mlp.dense_4h_to_h": "ffn.ffn.1.linear_layer",
            "input_layernorm": "norm1",
            "post_attention_layernorm": "norm3",
        }
        for theirs, mine in pairs.items():
            weights[o + mine + ".weight"] = sd[h + theirs + ".weight"]
            weights[o + mine + ".bias"] = sd[h + theirs + ".bias"]
    keys = {
        **SHARED,
        "filter_size": 4 * H,
        "position_embedding_type": "alibi",
        "embedding_layer_norm": True,
    }
    ours = _ours("bloom", weights, **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)


@pytest.mark.parametrize("family", ["starcoder", "santacoder"])
def test_bigcode_families_logits_equal_hf_gpt_bigcode(family: str) -> None:
    hf = _hf(
        transformers.GPTBigCodeConfig, transformers.GPTBigCodeForCausalLM, vocab_size=V,
        n_embd=H, n_layer=L, n_head=NH, n_positions=P, n_inner=256, multi_query=True,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    sd = hf.state_dict()
    d = H // NH
    weights = {
        "model.embedding_layer.word_embeddings.weight": sd["transformer.wte.weight"],
        "model.embedding_layer.position_embeddings.embed.weight": sd["transformer.wpe.weight"],
        "model.ln_f.weight": sd["transformer.ln_f.weight"],
        "model.ln_f.bias": sd["transformer.ln_f.bias"],
    }
    for n in range(L):
        h, o = f"transformer.h.{n}.", _layer(n)
        w, b = sd[h + "attn.c_attn.weight"], sd[h + "attn.c_attn.bias"]
        spans = {"q": slice(0, H), "k": slice(H, H + d), "v": slice(H + d, H + 2 * d)}
        for part, rows in spans.items():
            weights[o + f"self_attn.proj_{part}_dense_layer.weight"] = w[rows]
            weights[o + f"self_attn.proj_{part}_dense_layer.bias"] = b[rows]
        pairs = {
            "attn.c_proj": "self_attn.proj_output_dense_layer",
            "mlp.c_fc": "ffn.ffn.0.linear_layer",
            "mlp.c_proj": "ffn.ffn.1.linear_layer",
            "ln_1": "norm1",
            "ln_2": "norm3",
        }
        for theirs, mine in pairs.items():
            weights[o + mine + ".weight"] = sd[h + theirs + ".weight"]
            weights[o + mine + ".bias"] = sd[h + theirs + ".bias"]
    keys = {
        **SHARED,
        "filter_size": 256,
        "attention_module": "multiquery_attention",
        "extra_attention_params": {"num_kv_groups": 1},
    }
    ours = _ours(family, weights, **keys)
    ids = _ids()
    with torch.no_grad():
        reference = hf(ids).logits
    _compare(ours, reference, ids)
