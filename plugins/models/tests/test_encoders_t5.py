"""``t5`` equals Hugging Face ``T5ForConditionalGeneration`` (LayerNorm as Model Zoo's files say).

The model is built through plugtrain from a tiny section, every trainable parameter is set to
N(0, 0.2) (norm weights + 1), copied into the HF twin by Model Zoo's mapping, every HF
``T5LayerNorm`` replaced by an ``nn.LayerNorm`` carrying the same weight and bias, and
``logits(batch)`` compared in float32, eval mode, eager attention. Also: the parameter names,
the losses, the deprecated name and the section's validation.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from plugtrain import get_registry
from plugtrain.errors import ConfigError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

VOCAB, EXTRA, D, DKV, NH, DFF = 90, 6, 32, 8, 4, 64
SECTION: dict[str, Any] = {
    "src_vocab_size": VOCAB,
    "extra_ids": EXTRA,
    "d_model": D,
    "d_kv": DKV,
    "num_heads": NH,
    "d_ff": DFF,
    "encoder_num_hidden_layers": 2,
    "decoder_num_hidden_layers": 2,
    "norm_type": "layernorm",
    "layer_norm_epsilon": 1e-5,
    "dropout_rate": 0.0,
}
ATOL, RTOL = 1e-4, 1e-5


def build(name: str = "t5", **keys: Any) -> Any:
    """A model built through the registry, as a run file builds it."""
    torch.manual_seed(0)
    return get_registry().resolve("model", name)(**{**SECTION, **keys})


def randomise(model: nn.Module) -> None:
    """Every trainable parameter N(0, 0.2); norm weights + 1."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not parameter.requires_grad:
                continue
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
            if ".norm" in name and name.endswith("weight"):
                parameter.add_(1.0)


def batch(length: int = 16, target: int = 12) -> dict[str, torch.Tensor]:
    """B = 2 with right padding on both sides."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB + EXTRA, (2, length), generator=generator)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length - 5 :] = 0
    ids = ids * mask
    labels = torch.randint(2, VOCAB + EXTRA, (2, target), generator=generator)
    decoder_mask = torch.ones(2, target, dtype=torch.long)
    decoder_mask[0, target - 3 :] = 0
    labels = labels * decoder_mask
    decoder_ids = torch.cat([torch.zeros(2, 1, dtype=torch.long), labels[:, :-1]], dim=1)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "decoder_input_ids": decoder_ids,
        "decoder_attention_mask": decoder_mask,
        "labels": labels,
    }


def hf_names(layers: int = 2) -> dict[str, str]:
    """Model Zoo's name (under ``model.``) of each HF ``T5ForConditionalGeneration`` tensor."""
    names = {"shared.weight": "encoder_embeddings.word_embeddings.weight"}
    for stack in ("encoder", "decoder"):
        names[f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = (
            f"{stack}_embeddings.position_embed_helper.relative_attention_bias.weight"
        )
        names[f"{stack}.final_layer_norm.weight"] = f"{stack}.norm.weight"
        for n in range(layers):
            hf, ours = f"{stack}.block.{n}.layer.", f"{stack}.layers.{n}."
            for p in "qkv":
                names[f"{hf}0.SelfAttention.{p}.weight"] = (
                    f"{ours}self_attn.proj_{p}_dense_layer.weight"
                )
            names[f"{hf}0.SelfAttention.o.weight"] = (
                f"{ours}self_attn.proj_output_dense_layer.weight"
            )
            names[f"{hf}0.layer_norm.weight"] = f"{ours}norm1.weight"
            ffn = 1 if stack == "encoder" else 2
            names[f"{hf}{ffn}.DenseReluDense.wi.weight"] = f"{ours}ffn.ffn.0.linear_layer.weight"
            names[f"{hf}{ffn}.DenseReluDense.wo.weight"] = f"{ours}ffn.ffn.1.linear_layer.weight"
            names[f"{hf}1.layer_norm.weight"] = f"{ours}norm2.weight"
            if stack == "decoder":
                for p in "qkv":
                    names[f"{hf}1.EncDecAttention.{p}.weight"] = (
                        f"{ours}multihead_attn.proj_{p}_dense_layer.weight"
                    )
                names[f"{hf}1.EncDecAttention.o.weight"] = (
                    f"{ours}multihead_attn.proj_output_dense_layer.weight"
                )
                names[f"{hf}2.layer_norm.weight"] = f"{ours}norm3.weight"
    return names


def hf_twin(model: nn.Module) -> Any:
    """HF's T5 carrying ``model``'s weights, its norms replaced by LayerNorms."""
    config = transformers.T5Config(
        vocab_size=VOCAB + EXTRA, d_model=D, d_kv=DKV, num_heads=NH, d_ff=DFF, num_layers=2,
        num_decoder_layers=2, relative_attention_num_buckets=32,
        relative_attention_max_distance=128, dropout_rate=0.0, layer_norm_epsilon=1e-5,
        feed_forward_proj="relu", tie_word_embeddings=True, attn_implementation="eager",
        decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    hf = transformers.T5ForConditionalGeneration(config).eval()
    ours = model.state_dict()
    with torch.no_grad():
        for hf_name, name in hf_names().items():
            hf.get_parameter(hf_name).copy_(ours["model." + name])
    for name, module in list(hf.named_modules()):
        if type(module).__name__ != "T5LayerNorm":
            continue
        owner_name, _, attribute = name.rpartition(".")
        ours_name = "model." + hf_names()[name + ".weight"].removesuffix(".weight")
        norm = nn.LayerNorm(D, eps=1e-5)
        with torch.no_grad():
            norm.weight.copy_(ours[ours_name + ".weight"])
            norm.bias.copy_(ours[ours_name + ".bias"])
        setattr(hf.get_submodule(owner_name), attribute, norm)
    return hf


def test_t5_logits_equal_hugging_face_with_layernorm() -> None:
    model = build().eval()
    randomise(model)
    hf = hf_twin(model)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)["logits"]
        theirs = hf(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"],
            decoder_input_ids=b["decoder_input_ids"],
        ).logits  # fmt: skip
    assert ours.shape == (2, 12, VOCAB + EXTRA)
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=RTOL)
    # without decoder_input_ids the decoder reads the labels shifted right with 0
    without = {k: v for k, v in b.items() if k != "decoder_input_ids"}
    with torch.no_grad():
        torch.testing.assert_close(model.logits(without)["logits"], ours, atol=0, rtol=0)


def test_t5_parameter_names_are_model_zoo_s() -> None:
    model = build()
    names = {n: tuple(p.shape) for n, p in model.named_parameters()}
    expected = {"model." + ours for ours in hf_names().values()}
    expected |= {n.replace(".weight", ".bias") for n in expected if ".norm" in n}
    assert set(names) == expected
    assert names["model.encoder_embeddings.word_embeddings.weight"] == (VOCAB + EXTRA, D)
    assert names[
        "model.decoder_embeddings.position_embed_helper.relative_attention_bias.weight"
    ] == (32, NH)
    assert names["model.encoder.layers.0.self_attn.proj_q_dense_layer.weight"] == (NH * DKV, D)
    state = model.state_dict()
    shared = state["model.encoder_embeddings.word_embeddings.weight"]
    for tied in ("model.decoder_embeddings.word_embeddings.weight", "model.lm_head.weight"):
        assert state[tied].data_ptr() == shared.data_ptr()


def test_t5_untied_tables_and_head_have_their_own_names() -> None:
    model = build(share_embedding_weights=False, share_encoder_decoder_embedding=False)
    names = {n for n, _ in model.named_parameters()}
    assert {"model.decoder_embeddings.word_embeddings.weight", "model.lm_head.weight"} <= names


def test_t5_checkpoint_loads_under_either_tied_name() -> None:
    model = build()
    randomise(model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    table = state.pop("model.encoder_embeddings.word_embeddings.weight")
    state.pop("model.lm_head.weight")
    other = build()
    other.load_state_dict(state)
    assert torch.equal(other.model.encoder_embeddings.word_embeddings.weight, table)


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")


@pytest.mark.parametrize("scaling", ["batch_size", "num_masked", "precomputed_num_masked"])
def test_t5_loss_is_model_zoo_s(scaling: str) -> None:
    model = build(mlm_loss_scaling=scaling, lm_loss_weight="0.25").eval()
    randomise(model)
    b = batch()
    weight = torch.full((2, 12), 0.5)
    weight[1] = 0.125
    b["loss_weight"] = weight
    with torch.no_grad():
        out = model(b)
        logits = model.logits(b)["logits"]
    ce = _ce(logits, b["labels"]).view(2, 12) * b["decoder_attention_mask"]
    expected = {
        "batch_size": ce.sum() / 2 * 0.25,
        "num_masked": ce.sum() / b["decoder_attention_mask"].sum(),
        "precomputed_num_masked": (ce * weight).sum() / 2,
    }[scaling]
    torch.testing.assert_close(out["loss"], expected, atol=1e-6, rtol=1e-6)
    assert out["num_examples"] == 2
    assert 0.0 <= float(out["accuracy"]) <= 1.0


def test_t5_precomputed_scaling_without_loss_weight_falls_back_to_batch_size() -> None:
    model = build(mlm_loss_scaling="precomputed_num_masked", lm_loss_weight=0.5).eval()
    randomise(model)
    b = batch()
    with torch.no_grad():
        out = model(b)
        logits = model.logits(b)["logits"]
    ce = _ce(logits, b["labels"]).view(2, 12) * b["decoder_attention_mask"]
    torch.testing.assert_close(out["loss"], ce.sum() / 2 * 0.5, atol=1e-6, rtol=1e-6)


def test_t5_label_smoothing_applies_in_training_only() -> None:
    model = build(label_smoothing=0.1, mlm_loss_scaling="num_masked")
    randomise(model)
    b = batch()
    mask = b["decoder_attention_mask"].float()
    logits = model.logits(b)["logits"].detach()
    smoothed = nn.functional.cross_entropy(
        logits.flatten(0, 1), b["labels"].flatten(), reduction="none", label_smoothing=0.1
    )
    train_loss = model.train()(b)["loss"]
    torch.testing.assert_close(train_loss, (smoothed * mask.flatten()).sum() / mask.sum())
    eval_loss = model.eval()(b)["loss"]
    plain = (_ce(logits, b["labels"]) * mask.flatten()).sum() / mask.sum()
    torch.testing.assert_close(eval_loss, plain)


def test_t5_backward_reaches_every_parameter() -> None:
    model = build().train()
    model(batch())["loss"].backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing


def test_deprecated_name_warns_and_builds_t5() -> None:
    with pytest.warns(FutureWarning, match="use 't5' instead"):
        model = build("T5ForConditionalGeneration")
    assert model.family == "t5"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"d_modle": 32}, "unknown argument 'd_modle'"),
        ({"position_embedding_type": "alibi"}, "not supported"),
        ({"tie_encoder_decoder": True}, "not supported"),
        ({"mup_base_d_model": 16}, "mup_base_d_ff"),
        ({"share_encoder_decoder_embedding": True, "tgt_vocab_size": 50}, "tgt_vocab_size"),
        ({"norm_type": "batchnorm"}, "norm_type"),
        ({"layer_norm_epsilon": "small"}, "must be a number"),
        ({"position_embedding_type": "fixed"}, "src_max_position_embeddings"),
    ],
)
def test_t5_section_errors(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(**keys)


def test_init_weights_after_a_meta_build_gives_the_values_of_a_whole_build() -> None:
    keys = {**SECTION, "share_embedding_weights": False, "position_embedding_type": "fixed",
            "src_max_position_embeddings": 16, "tgt_max_position_embeddings": 16}  # fmt: skip
    factory = get_registry().resolve("model", "t5")
    with torch.device("meta"):
        empty = factory(**keys)
    empty.to_empty(device="cpu")
    torch.manual_seed(0)
    empty.init_weights()
    torch.manual_seed(0)
    whole = factory(**keys).state_dict()
    assert all(torch.equal(v, whole[k]) for k, v in empty.state_dict().items())
