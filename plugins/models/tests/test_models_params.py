"""Parameter names and order, globs, the weight-decay split, lr groups (SPEC-models 2, 6.4)."""

from __future__ import annotations

import fnmatch
import re

import torch

from plugtrain.bases.param_groups import adjust_learning_rate_groups, build_param_groups
from plugtrain_models.families import build_decoder

GPT3_12 = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_heads": 4,
    "num_hidden_layers": 12,
    "filter_size": 64,
    "max_position_embeddings": 32,
}
LLAMA = {
    **GPT3_12,
    "num_hidden_layers": 2,
    "position_embedding_type": "rotary",
    "rotary_dim": 8,
    "norm_type": "rmsnorm",
    "nonlinearity": "swiglu",
    "use_ffn_bias": False,
    "use_projection_bias_in_attention": False,
    "use_ffn_bias_in_attention": False,
    "share_embedding_weights": False,
}


def _full(glob: str, names: list[str]) -> list[str]:
    pattern = re.compile(fnmatch.translate(glob))
    return [n for n in names if pattern.fullmatch(n)]


def _names(model: torch.nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters()]


def _layer(n: int, rest: str) -> str:
    return f"model.transformer_decoder.layers.{n}.{rest}"


def test_sparsity_globs_of_the_gpt3_files_select_exactly_the_listed_tensors() -> None:
    names = _names(build_decoder("gpt3", GPT3_12))
    qkv = _full("*proj_[qkv]_dense_layer.weight", names)
    output = _full("*proj_output_dense_layer.weight", names)
    linear = _full("*linear_layer.weight", names)
    assert qkv == [
        _layer(n, f"self_attn.proj_{p}_dense_layer.weight") for n in range(12) for p in "qkv"
    ]
    assert output == [_layer(n, "self_attn.proj_output_dense_layer.weight") for n in range(12)]
    assert linear == [
        _layer(n, f"ffn.ffn.{i}.linear_layer.weight") for n in range(12) for i in (0, 1)
    ]
    assert len(qkv) + len(output) + len(linear) == 72


def test_the_linear_layer_glob_skips_the_glu_twin_and_takes_every_expert() -> None:
    dense = _names(build_decoder("llama", LLAMA))
    assert not [n for n in _full("*linear_layer.weight", dense) if "for_glu" in n]
    moe = {"num_experts": 2, "top_k": 1, "num_shared_experts": 1}
    names = _names(build_decoder("mixtral", {**LLAMA, "moe": moe}))
    selected = _full("*linear_layer.weight", names)
    expected = []
    for n in range(2):
        for e in range(2):
            expected += [
                _layer(n, f"ffn.experts.experts.{e}.{i}.linear_layer.weight") for i in (0, 1)
            ]
        expected += [
            _layer(n, f"ffn.experts.shared_experts.0.ffn.{i}.linear_layer.weight") for i in (0, 1)
        ]
    assert selected == expected
    assert not _full("*linear_layer.weight", [n for n in names if "gate" in n])


def test_named_parameters_follow_model_zoos_registration_order() -> None:
    model = build_decoder(
        "bloom", {**GPT3_12, "num_hidden_layers": 1, "position_embedding_type": "alibi",
                  "embedding_layer_norm": True, "norm_first_sandwich": True},
    )  # fmt: skip
    names = _names(model)
    assert names[:5] == [
        "model.embedding_layer.word_embeddings.weight",
        "model.embedding_layer.position_embed_helper.slopes",
        "model.embedding_ln_f.weight",
        "model.embedding_ln_f.bias",
        "model.ln_f.weight",
    ]
    layer = [n.removeprefix(_layer(0, "")) for n in names if n.startswith(_layer(0, ""))]
    modules = list(dict.fromkeys(n.rsplit(".", 1)[0] for n in layer))
    assert modules == [
        "self_attn.proj_q_dense_layer",
        "self_attn.proj_k_dense_layer",
        "self_attn.proj_v_dense_layer",
        "self_attn.proj_output_dense_layer",
        "norm1",
        "norm3",
        "norm1_post",
        "norm3_post",
        "ffn.ffn.0.linear_layer",
        "ffn.ffn.1.linear_layer",
    ]
    assert "model.lm_head.weight" not in names  # tied: listed once, under the embedding


def test_the_final_norm_has_both_names_in_the_state_dict_and_loads_from_either() -> None:
    model = build_decoder("gpt3", {**GPT3_12, "num_hidden_layers": 1})
    state = model.state_dict()
    assert torch.equal(state["model.ln_f.weight"], state["model.transformer_decoder.norm.weight"])
    for dropped in ("model.ln_f.", "model.transformer_decoder.norm."):
        partial = {k: v for k, v in state.items() if not k.startswith(dropped)}
        partial = {
            k: v + 1 if "norm.weight" in k or "ln_f.weight" in k else v for k, v in partial.items()
        }
        fresh = build_decoder("gpt3", {**GPT3_12, "num_hidden_layers": 1})
        fresh.load_state_dict(partial)
        torch.testing.assert_close(fresh.model.ln_f.weight, state["model.ln_f.weight"] + 1)


def test_weight_decay_excludes_every_bias_and_every_norm_weight() -> None:
    for family, keys in (("gpt3", GPT3_12), ("llama", LLAMA)):
        model = build_decoder(family, {**keys, "num_hidden_layers": 2})
        groups = build_param_groups(model)
        no_decay = {n for g in groups if g.get("weight_decay") == 0.0 for n in g["param_names"]}
        expected = {n for n in _names(model) if n.endswith("bias") or "norm" in n or "ln_f" in n}
        assert no_decay == expected, family
        assert any("norm1.weight" in n for n in no_decay), family


def test_mup_groups_select_their_sets_and_carry_mups_factors() -> None:
    mup = {"mup_base_hidden_size": 16, "mup_base_filter_size": 16}
    model = build_decoder("gpt3", {**GPT3_12, "num_hidden_layers": 2, **mup})
    names = _names(model)
    groups = model.lr_adjustment_groups
    select = {
        key: [n for n in names if any(_full(g, [n]) for g in globs)]
        for key, globs in groups.items()
    }
    assert select["embedding"] == [
        "model.embedding_layer.word_embeddings.weight",
        "model.embedding_layer.position_embeddings.embed.weight",
    ]
    attention = [
        _layer(n, f"self_attn.proj_{p}_dense_layer.weight")
        for n in range(2)
        for p in ("q", "k", "v", "output")
    ]
    assert select["decoder_attention"] == attention
    assert select["decoder_input_ffn"] == [
        _layer(n, "ffn.ffn.0.linear_layer.weight") for n in range(2)
    ]
    assert select["decoder_output_ffn"] == [
        _layer(n, "ffn.ffn.1.linear_layer.weight") for n in range(2)
    ]
    assert set(select["decoder_kernel"]) == set(
        attention + select["decoder_input_ffn"] + select["decoder_output_ffn"]
    )
    assert model.mup_lr_factors == {
        "decoder_attention": 0.5,
        "decoder_input_ffn": 0.5,
        "decoder_output_ffn": 0.25,
    }
    grouped, unused = adjust_learning_rate_groups(
        build_param_groups(model), list(model.mup_lr_factors.items()), model
    )
    assert unused == []
    factors = {n: g.get("adjust_learning_rate") for g in grouped for n in g["param_names"]}
    assert factors[_layer(1, "ffn.ffn.1.linear_layer.weight")] == 0.25
    assert factors["model.embedding_layer.word_embeddings.weight"] == 1.0
