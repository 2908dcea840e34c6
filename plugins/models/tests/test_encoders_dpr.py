"""``dpr`` equals Hugging Face's DPR question and context encoders; its loss is Model Zoo's.

The model is built through plugtrain from tiny encoder sections, every trainable parameter set to
N(0, 0.2) (norm weights + 1) and copied into the HF twins by Model Zoo's BERT mapping; their
``pooler_output`` (the ``[CLS]`` state, ``projection_dim: 0``) and score matrix equal
``logits(batch)``'s embeddings and ``q2c_scores`` in float32.
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

V, H, NH, L, F, P = 96, 32, 4, 2, 64, 32
B, C, S = 2, 3, 16
ENCODER: dict[str, Any] = {
    "vocab_size": V,
    "hidden_size": H,
    "num_hidden_layers": L,
    "num_heads": NH,
    "filter_size": F,
    "encoder_nonlinearity": "gelu",
    "pooler_nonlinearity": "tanh",
    "dropout_rate": 0.0,
    "attention_dropout_rate": 0.0,
    "max_position_embeddings": P,
    "layer_norm_epsilon": 1.0e-12,
}


def build(**keys: Any) -> Any:
    """A dpr model built through the registry, every parameter N(0, 0.2) (norms + 1), eval."""
    torch.manual_seed(0)
    sections = {"q_encoder": dict(ENCODER), "ctx_encoder": dict(ENCODER)}
    if "encoder" in keys:
        sections = {}
    model = get_registry().resolve("model", "dpr")(**{**sections, **keys}).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
            if ("norm" in name or "ln_f" in name) and name.endswith("weight"):
                parameter.add_(1.0)
    return model


def batch() -> dict[str, torch.Tensor]:
    """B questions with C contexts each, right padding."""
    generator = torch.Generator().manual_seed(1)
    q_mask = torch.ones(B, S, dtype=torch.long)
    q_mask[1, 10:] = 0
    c_mask = torch.ones(B, C, S, dtype=torch.long)
    c_mask[0, 1, 12:] = 0
    c_mask[1, 2, 7:] = 0
    types = torch.zeros(B, C, S, dtype=torch.long)
    types[:, :, 8:] = 1
    return {
        "questions_input_ids": torch.randint(1, V, (B, S), generator=generator) * q_mask,
        "questions_attention_mask": q_mask,
        "questions_token_type_ids": torch.zeros(B, S, dtype=torch.long),
        "ctx_input_ids": torch.randint(1, V, (B, C, S), generator=generator) * c_mask,
        "ctx_attention_mask": c_mask,
        "ctx_token_type_ids": types * c_mask,
        "labels": torch.arange(B) * C,
        "context_labels": torch.arange(B),
    }


def bert_names(prefix: str) -> dict[str, str]:
    """HF BERT name -> Model Zoo's name under ``prefix``."""
    names = {
        "embeddings.word_embeddings.weight": "embedding_layer.word_embeddings.weight",
        "embeddings.position_embeddings.weight": "embedding_layer.position_embeddings.embed.weight",
        "embeddings.token_type_embeddings.weight": "embedding_layer.segment_embeddings.weight",
        "embeddings.LayerNorm.weight": "embed_ln_f.weight",
        "embeddings.LayerNorm.bias": "embed_ln_f.bias",
    }
    for n in range(L):
        hf, ours = f"encoder.layer.{n}.", f"transformer_encoder.layers.{n}."
        for theirs, mine in (
            ("attention.self.query", "self_attn.proj_q_dense_layer"),
            ("attention.self.key", "self_attn.proj_k_dense_layer"),
            ("attention.self.value", "self_attn.proj_v_dense_layer"),
            ("attention.output.dense", "self_attn.proj_output_dense_layer"),
            ("attention.output.LayerNorm", "norm1"),
            ("intermediate.dense", "ffn.ffn.0.linear_layer"),
            ("output.dense", "ffn.ffn.1.linear_layer"),
            ("output.LayerNorm", "norm2"),
        ):
            for p in ("weight", "bias"):
                names[f"{hf}{theirs}.{p}"] = f"{ours}{mine}.{p}"
    return {k: prefix + v for k, v in names.items()}


def hf_twins(model: nn.Module) -> tuple[Any, Any]:
    """HF's question and context encoders carrying ``model``'s weights."""
    config = transformers.DPRConfig(
        vocab_size=V, hidden_size=H, num_hidden_layers=L, num_attention_heads=NH,
        intermediate_size=F, hidden_act="gelu", max_position_embeddings=P, type_vocab_size=2,
        layer_norm_eps=1e-12, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        projection_dim=0, attn_implementation="eager",
    )  # fmt: skip
    state = model.state_dict()
    twins = []
    for cls, ours, theirs in (
        (transformers.DPRQuestionEncoder, "question_encoder", "question_encoder"),
        (transformers.DPRContextEncoder, "ctx_encoder", "ctx_encoder"),
    ):
        hf = cls(config).eval()
        with torch.no_grad():
            for hf_name, name in bert_names(f"model.{ours}.").items():
                hf.get_parameter(f"{theirs}.bert_model.{hf_name}").copy_(state[name])
        twins.append(hf)
    return twins[0], twins[1]


def test_dpr_embeddings_and_scores_equal_hugging_face() -> None:
    model = build()
    question, context = hf_twins(model)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)
        q = question(
            input_ids=b["questions_input_ids"], attention_mask=b["questions_attention_mask"],
            token_type_ids=b["questions_token_type_ids"],
        ).pooler_output  # fmt: skip
        ctx = context(
            input_ids=b["ctx_input_ids"].view(-1, S),
            attention_mask=b["ctx_attention_mask"].view(-1, S),
            token_type_ids=b["ctx_token_type_ids"].view(-1, S),
        ).pooler_output
    assert ours["q2c_scores"].shape == (B, B * C)
    torch.testing.assert_close(ours["q_embeddings"], q, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours["ctx_embeddings"], ctx, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours["q2c_scores"], q @ ctx.T, atol=1e-4, rtol=1e-5)


def test_dpr_parameter_names_are_model_zoo_s() -> None:
    names = {n for n, _ in build().named_parameters()}
    expected = set(bert_names("model.question_encoder.").values())
    expected |= set(bert_names("model.ctx_encoder.").values())
    assert names == expected


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_dpr_loss_is_the_in_batch_cross_entropy(temperature: float) -> None:
    model = build(softmax_temperature=str(temperature))
    b = batch()
    with torch.no_grad():
        out = model(b)
        scores = model.logits(b)["q2c_scores"]
    expected = nn.functional.cross_entropy(scores / temperature, torch.arange(B) * C)
    torch.testing.assert_close(out["loss"], expected)
    assert out["num_examples"] == B


def test_dpr_mutual_information_adds_the_context_to_question_loss() -> None:
    model = build(mutual_information=True)
    b = batch()
    with torch.no_grad():
        out = model(b)
        logits = model.logits(b)
    ctx_first = logits["ctx_embeddings"].view(B, C, H)[:, 0]
    c2q = ctx_first @ logits["q_embeddings"].T
    torch.testing.assert_close(logits["c2q_scores"], c2q)
    f = 1 / (1 + C)
    expected = (1 - f) * nn.functional.cross_entropy(logits["q2c_scores"], b["labels"]) + f * (
        nn.functional.cross_entropy(c2q, torch.arange(B))
    )
    torch.testing.assert_close(out["loss"], expected)


@pytest.mark.parametrize("pooler_type", ["mean", "ffn_pooler"])
def test_dpr_pooler_types(pooler_type: str) -> None:
    model = build(pooler_type=pooler_type)
    b = batch()
    encoder = model.model.question_encoder
    with torch.no_grad():
        hidden, pooled = encoder(
            b["questions_input_ids"], b["questions_attention_mask"], b["questions_token_type_ids"]
        )
        q = model.logits(b)["q_embeddings"]
    if pooler_type == "mean":
        mask = b["questions_attention_mask"].unsqueeze(-1).float()
        torch.testing.assert_close(q, (hidden * mask).sum(1) / mask.sum(1))
    else:
        assert pooled is not None
        torch.testing.assert_close(
            q, torch.tanh(encoder.pooler.pooler.ffn[0].linear_layer(hidden[:, 0]))
        )


def test_dpr_one_shared_encoder_and_a_uni_encoder_checkpoint_loads_into_both() -> None:
    shared = build(encoder=dict(ENCODER), use_biencoder=False)
    names = {n for n, _ in shared.named_parameters()}
    assert names == set(bert_names("model.question_encoder.").values())
    both = build(encoder=dict(ENCODER))
    both.load_state_dict(shared.state_dict())
    b = batch()
    with torch.no_grad():
        torch.testing.assert_close(both.logits(b)["q2c_scores"], shared.logits(b)["q2c_scores"])


def test_dpr_encoder_sections_accept_model_zoo_s_deprecated_keys() -> None:
    section = {**ENCODER, "mlm_loss_weight": 1.0, "share_embedding_weights": True}
    build(q_encoder=section, ctx_encoder=dict(ENCODER))


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"encoder": dict(ENCODER), "q_encoder": dict(ENCODER)}, "only encoder"),
        ({"ctx_encoder": None}, "give both q_encoder and ctx_encoder"),
        ({"q_encoder": {**ENCODER, "hiden_size": 8}}, "hiden_size"),
        ({"use_biencoder": False}, "use_biencoder"),
        ({"pooler_type": "max"}, "pooler_type"),
    ],
)
def test_dpr_section_errors(keys: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(**keys)
