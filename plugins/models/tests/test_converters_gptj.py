"""GPT-J, GPT-NeoX, Falcon and BLOOM converters against transformers (tiny local models)."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import transformers
from support.hf_models import (
    LOGITS_ATOL,
    assert_converts_both_ways,
    hf_logits,
    ids,
    random_hf_model,
    save_hf,
)

from plugtrain.conversion import ConversionError, export_hf, hf_to_plugtrain
from plugtrain.discovery.loading import get_registry

SMALL = {"vocab_size": 128, "max_position_embeddings": 64}
NEOX = {
    **SMALL,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
}
FALCON = {
    **SMALL,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "ffn_hidden_size": 96,
}
FALCON_7B = {"new_decoder_architecture": False, "multi_query": True, "parallel_attn": True}
CASES = {
    "gptj": (
        transformers.GPTJConfig, transformers.GPTJForCausalLM,
        {"vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8,
         "n_inner": 96, "n_positions": 64, "activation_function": "gelu_new"},
    ),
    "gpt-neox-half-rotary-theta-5000": (
        transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM,
        {**NEOX, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0,
                                     "partial_rotary_factor": 0.5}},
    ),
    "gpt-neox-tied-no-attention-bias-linear-rope-scaling": (
        transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM,
        {**NEOX, "tie_word_embeddings": True, "attention_bias": False,
         "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
    ),
    "falcon-40b-new-architecture": (
        transformers.FalconConfig, transformers.FalconForCausalLM,
        {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2},
    ),
    "falcon-180b-style-bias-untied-head": (
        transformers.FalconConfig, transformers.FalconForCausalLM,
        {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 1, "bias": True,
         "tie_word_embeddings": False, "activation": "gelu_new"},
    ),
    "bloom": (
        transformers.BloomConfig, transformers.BloomForCausalLM,
        {"vocab_size": 128, "hidden_size": 64, "n_layer": 2, "n_head": 4},
    ),
    "bloom-six-heads-untied": (  # ALiBi's slopes for a head count that is no power of two
        transformers.BloomConfig, transformers.BloomForCausalLM,
        {"vocab_size": 128, "hidden_size": 48, "n_layer": 2, "n_head": 6,
         "tie_word_embeddings": False},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_family_converts_both_ways_with_transformers_logits(case: str, tmp_path: Path) -> None:
    config_class, model_class, config = CASES[case]
    hf = random_hf_model(config_class, model_class, **config)
    folder = save_hf(hf, tmp_path / case)
    measured = assert_converts_both_ways(hf, folder)
    assert measured["changed_on_round_trip"] == []
    assert case.startswith(measured["converter"])  # found from config.json's model_type


def _falcon_7b(tmp_path: Path, **config: Any) -> tuple[Any, Path]:
    hf = random_hf_model(
        transformers.FalconConfig,
        transformers.FalconForCausalLM,
        **{**FALCON, **FALCON_7B, **config},
    )
    return hf, save_hf(hf, tmp_path / "falcon-7b")


def _our_logits(converted: Any, tokens: torch.Tensor) -> torch.Tensor:
    model = get_registry().resolve("model", converted.model_name)(**converted.model_keys).eval()
    model.load_state_dict(converted.state)
    with torch.no_grad():
        return model.logits(tokens)


@pytest.mark.parametrize("multi_query", [True, False], ids=["multi-query", "per-head-qkv"])
def test_falcon_7b_one_norm_layouts_import_with_transformers_logits(
    multi_query: bool, tmp_path: Path
) -> None:
    hf, folder = _falcon_7b(tmp_path, multi_query=multi_query)
    converted = hf_to_plugtrain(folder)
    assert converted.model_keys["use_untied_layer_norm"] is False
    groups = 1 if multi_query else 4
    assert converted.model_keys["extra_attention_params"] == {"num_kv_groups": groups}
    tokens = ids()
    reference = hf_logits(hf, tokens)
    torch.testing.assert_close(
        _our_logits(converted, tokens), reference, atol=LOGITS_ATOL, rtol=1e-5
    )


@pytest.mark.parametrize("multi_query", [True, False], ids=["multi-query", "per-head-qkv"])
def test_falcon_7b_converts_both_ways(multi_query: bool, tmp_path: Path) -> None:
    hf, folder = _falcon_7b(tmp_path, multi_query=multi_query)
    assert assert_converts_both_ways(hf, folder)["changed_on_round_trip"] == []


def _refined_web(folder: Path, model_type: str, **keys: Any) -> None:
    """Rewrite a saved Falcon's config.json as the first Falcon-7B / 40B files spelled it."""
    config = json.loads((folder / "config.json").read_text())
    for key in ("num_attention_heads", "num_hidden_layers", "num_kv_heads", "num_key_value_heads",
                "new_decoder_architecture", "num_ln_in_parallel_attn", "rope_parameters",
                "max_position_embeddings", "ffn_hidden_size", "multi_query"):  # fmt: skip
        config.pop(key, None)
    config.update(model_type=model_type, architectures=["RWForCausalLM"], n_layer=2, **keys)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("model_type", ["RefinedWebModel", "RefinedWeb"])
def test_falcon_refined_web_files_import_with_transformers_logits(
    model_type: str, tmp_path: Path
) -> None:
    is_40b = model_type == "RefinedWeb"
    layout = {"new_decoder_architecture": True, "num_kv_heads": 2} if is_40b else FALCON_7B
    config = {**FALCON, "ffn_hidden_size": 256, "max_position_embeddings": 2048, **layout}
    hf = random_hf_model(transformers.FalconConfig, transformers.FalconForCausalLM, **config)
    folder = save_hf(hf, tmp_path / model_type)
    _refined_web(folder, model_type, n_head=4, **({"n_head_kv": 2} if is_40b else {}))
    converted = hf_to_plugtrain(folder)
    assert converted.model_keys["extra_attention_params"] == {"num_kv_groups": 2 if is_40b else 1}
    assert converted.model_keys["use_untied_layer_norm"] is is_40b
    assert converted.dropped_config_keys == []
    tokens = ids()
    reference = hf_logits(hf, tokens)
    torch.testing.assert_close(
        _our_logits(converted, tokens), reference, atol=LOGITS_ATOL, rtol=1e-5
    )


def test_gpt_neox_transformers_4_config_reads_rotary_pct_and_rotary_emb_base(
    tmp_path: Path,
) -> None:
    config = {**NEOX, "rope_parameters": {"rope_type": "default", "rope_theta": 2000.0,
                                          "partial_rotary_factor": 0.5}}  # fmt: skip
    hf = random_hf_model(transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM, **config)
    folder = save_hf(hf, tmp_path / "neox")
    written = json.loads((folder / "config.json").read_text())
    del written["rope_parameters"]
    written.update(rotary_pct=0.5, rotary_emb_base=2000, rope_scaling=None)
    (folder / "config.json").write_text(json.dumps(written))
    converted = hf_to_plugtrain(folder)
    assert (converted.model_keys["rotary_dim"], converted.model_keys["rope_theta"]) == (8, 2000)
    tokens = ids()
    reference = hf_logits(hf, tokens)
    torch.testing.assert_close(
        _our_logits(converted, tokens), reference, atol=LOGITS_ATOL, rtol=1e-5
    )


NATIVE = {"vocab_size": 128, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 2,
          "filter_size": 96, "max_position_embeddings": 64}  # fmt: skip
NATIVE_KEYS = {
    "gptj": {"use_projection_bias_in_attention": False, "use_ffn_bias_in_attention": False,
             "use_ffn_bias": True, "use_bias_in_output": True},
    "gpt-neox": {"use_ffn_bias": True, "use_untied_layer_norm": True},
    "falcon": {"use_untied_layer_norm": True, "rotary_dim": 16, "use_ffn_bias": True},
}  # fmt: skip
"""A run file's keys each family exports; GPT-J and GPT-NeoX leave rotary_dim null (a quarter
of each head), Falcon keeps aiayn_attention (as many key/value heads as heads)."""


@pytest.mark.parametrize("family", list(NATIVE_KEYS))
def test_a_run_files_model_exports_what_it_computes(family: str, tmp_path: Path) -> None:
    keys = {**NATIVE, **NATIVE_KEYS[family]}
    torch.manual_seed(0)
    model = get_registry().resolve("model", family)(**keys).eval()
    with torch.no_grad():  # large enough weights that a wrong rotary width shows in the logits
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.2).add_(1.0 if "norm" in name and parameter.ndim == 1 else 0)
    out = export_hf(model.state_dict(), family, keys, tmp_path / "out")
    tokens = ids()
    with torch.no_grad():
        ours = model.logits(tokens)
    torch.testing.assert_close(hf_logits(out, tokens), ours, atol=LOGITS_ATOL, rtol=1e-5)


def test_falcon_export_refuses_a_partial_rotary_width(tmp_path: Path) -> None:
    keys = {**NATIVE, "use_untied_layer_norm": True}  # rotary_dim: null is a quarter head
    model = get_registry().resolve("model", "falcon")(**keys)
    with pytest.raises(ConversionError, match="rotates the whole head"):
        export_hf(model.state_dict(), "falcon", keys, tmp_path / "out")


def test_old_gptj_files_with_mask_buffers_import_from_a_bin(tmp_path: Path) -> None:
    config_class, model_class, config = CASES["gptj"]
    hf = random_hf_model(config_class, model_class, **config)
    single = save_hf(hf, tmp_path / "single")
    old = tmp_path / "old"
    old.mkdir()
    state = dict(hf.state_dict())
    for layer in range(2):  # what transformers 4 before 4.30 saved in every block
        state[f"transformer.h.{layer}.attn.bias"] = torch.ones(1, 1, 64, 64, dtype=torch.bool)
        state[f"transformer.h.{layer}.attn.masked_bias"] = torch.tensor(-1e9)
    torch.save(state, old / "pytorch_model.bin")
    (old / "config.json").write_text((single / "config.json").read_text())
    reference = hf_to_plugtrain(single).state
    converted = hf_to_plugtrain(old / "pytorch_model.bin").state
    assert converted.keys() == reference.keys()
    assert all(torch.equal(converted[k], v) for k, v in reference.items())


def test_gpt_neox_headless_import_makes_lm_head_and_export_drops_it(tmp_path: Path) -> None:
    hf = random_hf_model(transformers.GPTNeoXConfig, transformers.GPTNeoXModel, **NEOX)
    folder = save_hf(hf, tmp_path / "base")
    converted = hf_to_plugtrain(folder)
    assert converted.converter == "gpt-neox-headless"
    head = converted.state["model.lm_head.weight"]
    assert head.shape == (128, 64)
    assert 0.015 < float(head.std()) < 0.025  # N(0, 0.02), 8192 draws: std within a few %
    tokens = ids()
    with torch.no_grad():
        hidden = hf(tokens).last_hidden_state
    expected = hidden @ head.t()  # the base model's output through the head import made
    torch.testing.assert_close(
        _our_logits(converted, tokens), expected, atol=LOGITS_ATOL, rtol=1e-5
    )
    out = export_hf(converted.state, "gpt-neox-headless", converted.model_keys, tmp_path / "out")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["GPTNeoXModel"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = transformers.GPTNeoXModel.from_pretrained(out, attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).last_hidden_state, hidden, atol=0, rtol=0)
    from safetensors import safe_open

    with safe_open(str(next(out.glob("*.safetensors"))), "pt") as exported:
        names = set(exported.keys())
    assert not any("lm_head" in n or "embed_out" in n for n in names)
    assert names == set(hf.state_dict())


def test_bloom_bfloat16_stays_bfloat16_slopes_included(tmp_path: Path) -> None:
    _, model_class, config = CASES["bloom"]
    hf = random_hf_model(transformers.BloomConfig, model_class, **config)
    folder = save_hf(copy.deepcopy(hf).to(torch.bfloat16), tmp_path / "bf16")
    converted = hf_to_plugtrain(folder)
    assert {t.dtype for t in converted.state.values()} == {torch.bfloat16}
    slopes = converted.state["model.embedding_layer.position_embed_helper.slopes"]
    assert slopes.flatten().tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]  # 2^(-8i/heads)
    out = export_hf(converted.state, "bloom", converted.model_keys, tmp_path / "out")
    again = hf_to_plugtrain(out).state
    assert all(torch.equal(again[k], v) for k, v in converted.state.items())


@pytest.mark.parametrize(
    ("model_class", "config", "named"),
    [
        (transformers.FalconForCausalLM, {**FALCON, "alibi": True}, "alibi"),
        (transformers.FalconForCausalLM, {**FALCON, **FALCON_7B, "parallel_attn": False},
         "parallel_attn"),
        (transformers.GPTNeoXForCausalLM, {**NEOX, "use_parallel_residual": False},
         "use_parallel_residual"),
        (transformers.GPTNeoXForCausalLM,
         {**NEOX, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling"),
        (transformers.BloomForCausalLM,
         {"vocab_size": 128, "hidden_size": 64, "n_layer": 1, "n_head": 4,
          "apply_residual_connection_post_layernorm": True},
         "apply_residual_connection_post_layernorm"),
    ],
    ids=["falcon-alibi", "falcon-sequential", "neox-sequential", "neox-dynamic-rope",
         "bloom-post-norm-residual"],
)  # fmt: skip
def test_a_forward_the_decoder_lacks_is_refused_naming_the_key(
    model_class: Any, config: dict[str, Any], named: str, tmp_path: Path
) -> None:
    config_class = model_class.config_class
    hf = random_hf_model(config_class, model_class, **config)
    folder = save_hf(hf, tmp_path / "hf")
    with pytest.raises(ConversionError, match=named):
        hf_to_plugtrain(folder)


def test_bloom_export_refuses_an_ffn_width_hf_bloom_cannot_hold(tmp_path: Path) -> None:
    keys = {"vocab_size": 128, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 1,
            "filter_size": 128, "position_embedding_type": "alibi", "embedding_layer_norm": True,
            "nonlinearity": "gelu_new"}  # fmt: skip
    model = get_registry().resolve("model", "bloom")(**keys)
    with pytest.raises(ConversionError, match="filter_size = 128"):
        export_hf(model.state_dict(), "bloom", keys, tmp_path / "out")
