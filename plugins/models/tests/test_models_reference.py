"""The families without a ``transformers`` class against a reference written from the spec.

jais and btlm (ALiBi, SwiGLU, biases, tied, muP) and mixtral's moe_111M shape (ALiBi, SwiGLU,
MoE top-1 with a null-expert bias and a shared expert, ``output_logits_scale``) are compared
with :func:`reference_logits`, a plain per-head, per-token transcription of SPEC-models 1.3,
1.6 and 1.8 that shares no code with the package. Also the other checks of SPEC-models 6.1:
GELU is the erf form, ALiBi slopes, the load-balancing loss against HF, and the two losses.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch.nn import functional

from plugtrain_models.families import build_decoder
from plugtrain_models.ffn import load_balancing_loss
from plugtrain_models.layers import activation, alibi_slopes
from plugtrain_models.loss import lm_loss

V, H, NH, L, P, F = 128, 64, 4, 2, 64, 96
D = H // NH
ALIBI_SWIGLU = {
    "vocab_size": V,
    "hidden_size": H,
    "num_heads": NH,
    "num_hidden_layers": L,
    "max_position_embeddings": P,
    "filter_size": F,
    "position_embedding_type": "alibi",
    "nonlinearity": "swiglu",
}


def _randomised(family: str, **keys: Any) -> Any:
    """Our model with every trainable parameter N(0, 0.2) (norm weights + 1), in eval mode."""
    model = build_decoder(family, {**ALIBI_SWIGLU, **keys}).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.normal_(0.0, 0.2)
                if "norm" in name or "ln_f" in name:
                    parameter.add_(1.0 if name.endswith("weight") else 0.0)
    return model


def _slopes(heads: int) -> list[float]:
    """The spec's ALiBi slopes, written out independently of the package."""
    closest = 1
    while closest * 2 <= heads:
        closest *= 2
    base = [2 ** (-8 * (j + 1) / closest) for j in range(closest)]
    extra = [2 ** (-8 * (j + 1) / (2 * closest)) for j in range(0, 2 * closest, 2)]
    return (base + extra)[:heads]


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def _swiglu_ffn(x: torch.Tensor, w: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    def lin(name: str, h: torch.Tensor) -> torch.Tensor:
        return h @ w[f"{prefix}{name}.weight"].T + w[f"{prefix}{name}.bias"]

    gate = lin("0.linear_layer_for_glu", x)
    return lin("1.linear_layer", gate * torch.sigmoid(gate) * lin("0.linear_layer", x))


def _moe(x: torch.Tensor, w: dict[str, torch.Tensor], o: str, cfg: dict[str, Any]) -> torch.Tensor:
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        p = torch.softmax(x[t] @ w[o + "ffn.gate.weight"].T, dim=-1)
        top = torch.topk(p, cfg["top_k"]).indices.tolist()
        total = sum(float(p[e]) for e in top) + cfg["null_expert_bias"]
        for e in top:
            expert = _swiglu_ffn(x[t : t + 1], w, f"{o}ffn.experts.experts.{e}.")[0]
            out[t] += float(p[e]) / total * expert
        for s in range(cfg.get("num_shared_experts", 0)):
            out[t] += _swiglu_ffn(x[t : t + 1], w, f"{o}ffn.experts.shared_experts.{s}.ffn.")[0]
    return out


def reference_logits(
    w: dict[str, torch.Tensor], ids: torch.Tensor, cfg: dict[str, Any]
) -> torch.Tensor:
    """SPEC-models 1.3 for one sequence, token by token and head by head."""
    x = w["model.embedding_layer.word_embeddings.weight"][ids] * cfg["embeddings_scale"]
    slopes = _slopes(NH)
    q_scale = cfg["alpha"] / math.sqrt(D) / (math.sqrt(D) if cfg["qk_by_d"] else 1.0)
    for n in range(L):
        o = f"model.transformer_decoder.layers.{n}."

        def lin(name: str, h: torch.Tensor, o: str = o) -> torch.Tensor:
            return h @ w[f"{o}{name}.weight"].T + w[f"{o}{name}.bias"]

        h = _layer_norm(x, w[o + "norm1.weight"], w[o + "norm1.bias"])
        q, k, v = (lin(f"self_attn.proj_{p}_dense_layer", h) for p in "qkv")
        heads = []
        for head in range(NH):
            cols = slice(head * D, (head + 1) * D)
            rows = []
            for i in range(len(ids)):
                scores = torch.stack(
                    [
                        q_scale * q[i, cols] @ k[j, cols] - slopes[head] * (i - j)
                        for j in range(i + 1)
                    ]
                )
                probabilities = torch.softmax(scores, dim=0)
                rows.append((probabilities.unsqueeze(1) * v[: i + 1, cols]).sum(0))
            heads.append(torch.stack(rows))
        x = x + lin("self_attn.proj_output_dense_layer", torch.cat(heads, dim=1))
        h = _layer_norm(x, w[o + "norm3.weight"], w[o + "norm3.bias"])
        x = x + (_moe(h, w, o, cfg["moe"]) if cfg.get("moe") else _swiglu_ffn(h, w, o + "ffn.ffn."))
    x = _layer_norm(x, w["model.ln_f.weight"], w["model.ln_f.bias"])
    return x @ w["model.embedding_layer.word_embeddings.weight"].T * cfg["logits_scale"]


def _check(model: Any, cfg: dict[str, Any]) -> float:
    weights = {k: v.detach() for k, v in model.named_parameters()}
    ids = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model.logits(ids)
        expected = torch.stack([reference_logits(weights, row, cfg) for row in ids])
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-5)
    return float((logits - expected).abs().max())


@pytest.mark.parametrize("family", ["jais", "btlm"])
def test_alibi_swiglu_mup_families_equal_the_reference(family: str) -> None:
    keys = {
        "embeddings_scale": 10.0,
        "mup_base_hidden_size": 32,
        "mup_base_filter_size": 48,
        "output_logits_alpha": 3.0,
        "loss_scaling": "batch_size",
        "loss_weight": 1 / 24,
    }
    model = _randomised(family, **keys)
    cfg = {"embeddings_scale": 10.0, "alpha": 1.0, "qk_by_d": True, "logits_scale": 3.0 / 2}
    _check(model, cfg)


def test_mixtral_moe_111m_shape_equals_the_reference() -> None:
    moe = {
        "num_experts": 4,
        "top_k": 1,
        "null_expert_bias": 1.1,
        "num_shared_experts": 1,
        "load_balancing_loss_coef": 0.01,
        "routing_algorithm": "learned",
        "router_fp32": True,
    }
    keys = {
        "embeddings_scale": 9.1706,
        "output_logits_scale": 0.3651,
        "scale_qk_dot_by_d": True,
        "moe": moe,
    }
    model = _randomised("mixtral", **keys)
    cfg = {
        "embeddings_scale": 9.1706,
        "alpha": 1.0,
        "qk_by_d": True,
        "logits_scale": 0.3651,
        "moe": moe,
    }
    _check(model, cfg)


def test_gelu_is_the_erf_form_not_tanh() -> None:
    x = torch.linspace(-4, 4, 801)
    gelu = activation("gelu")
    torch.testing.assert_close(gelu(x), 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    tanh_form = functional.gelu(x, approximate="tanh")
    assert (gelu(x) - tanh_form).abs().max() > 1e-4


@pytest.mark.parametrize("heads", [4, 6, 12, 71])
def test_alibi_slopes_follow_the_formula(heads: int) -> None:
    assert alibi_slopes(heads) == pytest.approx(_slopes(heads), rel=1e-12)
    model = build_decoder(
        "bloom",
        {**ALIBI_SWIGLU, "num_heads": heads, "hidden_size": 2 * heads, "num_hidden_layers": 1},
    )
    slopes = model.model.embedding_layer.position_embed_helper.slopes
    assert slopes.shape == (heads, 1)
    assert not slopes.requires_grad
    assert slopes.squeeze(1).tolist() == pytest.approx(_slopes(heads), rel=1e-6)


def test_alibi_slopes_for_six_heads_are_the_four_list_then_every_other_of_the_eight_list() -> None:
    expected = [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    assert alibi_slopes(6) == pytest.approx(expected)


def test_load_balancing_loss_at_batch_one_equals_hf_mixtral() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    generator = torch.Generator().manual_seed(3)
    gate_logits = [torch.randn(1, 10, 4, generator=generator) for _ in range(3)]
    stats = []
    for logits in gate_logits:
        p = torch.softmax(logits, dim=-1)
        indicator = torch.zeros_like(p).scatter(-1, p.topk(2, dim=-1).indices, 1.0)
        stats.append((p, indicator))
    ours = load_balancing_loss(stats, torch.ones(1, 10))
    theirs = mixtral.load_balancing_loss_func(tuple(g[0] for g in gate_logits), 4, 2)
    torch.testing.assert_close(ours, theirs)


def test_the_losses_follow_the_spec_on_a_partial_mask() -> None:
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 6, 11, generator=generator)
    labels = torch.randint(0, 11, (2, 6), generator=generator)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    ce = torch.stack(
        [
            -torch.log_softmax(logits[b, t], dim=-1)[labels[b, t]]
            for b in range(2)
            for t in range(6)
            if mask[b, t]
        ]
    )
    per_token = lm_loss(logits, labels, mask, scaling="num_tokens", weight=1.0)
    torch.testing.assert_close(per_token, ce.sum() / 8)
    per_batch = lm_loss(logits, labels, mask, scaling="batch_size", weight=1 / 6)
    torch.testing.assert_close(per_batch, ce.sum() / 2 / 6)


def test_moe_training_loss_adds_the_weighted_load_balancing_term() -> None:
    moe = {"num_experts": 4, "top_k": 2, "load_balancing_loss_coef": 0.5}
    no_dropout = {"dropout_rate": 0.0, "attention_dropout_rate": 0.0, "embedding_dropout_rate": 0.0}
    model = _randomised("mixtral", moe=moe, **no_dropout)
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": ids, "labels": ids.roll(-1, 1), "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        evaluated = model(batch)["loss"]
        model.train()
        _logits, stats = model.model(ids)
        trained = model(batch)["loss"]
    extra = 0.5 * load_balancing_loss(stats, batch["attention_mask"])
    assert float(extra) > 0.0
    torch.testing.assert_close(trained, evaluated + extra)


def test_vsl_packing_equals_the_sequences_run_apart() -> None:
    """Two documents packed in one row, with ``attention_span`` and ``position_ids``."""
    keys = {"position_embedding_type": "rotary", "rotary_dim": 8, "nonlinearity": "gelu"}
    model = _randomised("llama", **keys)
    generator = torch.Generator().manual_seed(4)
    first, second = (
        torch.randint(0, V, (1, 5), generator=generator),
        torch.randint(0, V, (1, 7), generator=generator),
    )
    packed = torch.cat([first, second], dim=1)
    span = torch.tensor([[4, 3, 2, 1, 0, 6, 5, 4, 3, 2, 1, 0]])  # tokens left in the document
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        together, _ = model.model(packed, positions, span)
        torch.testing.assert_close(together[:, :5], model.logits(first), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(together[:, 5:], model.logits(second), atol=1e-5, rtol=1e-5)


def test_batch_size_scaling_reports_the_per_token_loss_beside_its_loss() -> None:
    model = _randomised("gpt3", loss_scaling="batch_size", loss_weight=1 / 12)
    ids = torch.randint(0, V, (2, 13), generator=torch.Generator().manual_seed(6))
    mask = torch.tensor([[1] * 12, [1] * 6 + [0] * 6])
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "attention_mask": mask}
    with torch.no_grad():
        out = model(batch)
        logits = model.logits(batch["input_ids"])
    per_token = lm_loss(logits, batch["labels"], mask, scaling="num_tokens", weight=1.0)
    torch.testing.assert_close(out["token_loss"], per_token)
    torch.testing.assert_close(out["loss"], per_token * 18 / 2 / 12)
    assert out["num_examples"] == 18
    assert not model.report_perplexity
    assert _randomised("gpt3").report_perplexity


def test_a_window_with_vsl_is_an_error() -> None:
    model = _randomised("mistral", attention_sliding_window_length=4)
    ids = torch.zeros(1, 6, dtype=torch.long)
    with pytest.raises(ValueError, match="sliding window cannot be combined with VSL"):
        model.model(ids, None, torch.zeros(1, 6, dtype=torch.long))
