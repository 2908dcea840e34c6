"""``transformer`` equals an independent reference: torch's ``nn.Transformer`` (post-LN).

Model Zoo's transformer (fixed tensor2tensor positions, post-LN blocks, FFN biases, scaled
attention from ``use_transformer_initialization``) is torch's ``nn.Transformer(norm_first=False)``
with zero in-projection and output-projection biases, the interleaved sinusoid added to both
inputs and the output ``x d_model^-1/2 . W^T``. The table is written out here from its formula.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from plugtrain import get_registry

VOCAB, D, NH, DFF, POSITIONS = 96, 32, 4, 64, 32
SECTION: dict[str, Any] = {
    "src_vocab_size": VOCAB,
    "tgt_vocab_size": VOCAB,
    "d_model": D,
    "d_kv": D // NH,
    "num_heads": NH,
    "d_ff": DFF,
    "encoder_num_hidden_layers": 2,
    "decoder_num_hidden_layers": 2,
    "position_embedding_type": "fixed",
    "src_max_position_embeddings": POSITIONS,
    "tgt_max_position_embeddings": POSITIONS,
    "norm_type": "layernorm",
    "use_pre_encoder_decoder_layer_norm": False,
    "use_pre_encoder_decoder_dropout": True,
    "use_dropout_outside_residual_path": False,
    "use_ffn_bias": True,
    "use_transformer_initialization": True,
    "mlm_loss_scaling": "precomputed_num_masked",
    "lm_loss_weight": 0.033,
    "dropout_rate": 0.0,
    "relu_dropout_rate": 0.0,
}


def build() -> Any:
    """The section built through the registry, each trainable parameter N(0, 0.2), norms + 1."""
    torch.manual_seed(0)
    model = get_registry().resolve("model", "transformer")(**SECTION).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
                if ".norm" in name and name.endswith("weight"):
                    parameter.add_(1.0)
    return model


def table(positions: int, width: int) -> torch.Tensor:
    """tensor2tensor's timing signal, sin and cos interleaved per frequency."""
    rows = torch.zeros(positions, width, dtype=torch.float64)
    half = width // 2
    for p in range(positions):
        for j in range(half):
            angle = p * math.exp(-j * math.log(1e4) / (half - 1))
            rows[p, 2 * j], rows[p, 2 * j + 1] = math.sin(angle), math.cos(angle)
    return rows.float()


def _attention(theirs: nn.MultiheadAttention, state: dict[str, torch.Tensor], prefix: str) -> None:
    q, k, v = (state[f"{prefix}proj_{p}_dense_layer.weight"] for p in "qkv")
    theirs.in_proj_weight.copy_(torch.cat([q, k, v]))
    theirs.in_proj_bias.zero_()
    theirs.out_proj.weight.copy_(state[f"{prefix}proj_output_dense_layer.weight"])
    theirs.out_proj.bias.zero_()


def _ffn_and_norms(layer: nn.Module, state: dict[str, torch.Tensor], prefix: str) -> None:
    for theirs, ours in (
        ("linear1", "ffn.ffn.0.linear_layer"),
        ("linear2", "ffn.ffn.1.linear_layer"),
    ):
        getattr(layer, theirs).weight.copy_(state[f"{prefix}{ours}.weight"])
        getattr(layer, theirs).bias.copy_(state[f"{prefix}{ours}.bias"])
    for norm in ("norm1", "norm2", "norm3"):
        if hasattr(layer, norm):
            getattr(layer, norm).weight.copy_(state[f"{prefix}{norm}.weight"])
            getattr(layer, norm).bias.copy_(state[f"{prefix}{norm}.bias"])


def reference(model: nn.Module) -> nn.Transformer:
    """torch's transformer carrying the model's weights."""
    torch.manual_seed(0)
    theirs = nn.Transformer(
        D, NH, 2, 2, DFF, dropout=0.0, batch_first=True, norm_first=False
    ).train()  # fmt: skip
    # dropout 0: training mode computes the same function without the nested-tensor fast path
    state = model.state_dict()
    with torch.no_grad():
        for stack in ("encoder", "decoder"):
            for n, layer in enumerate(getattr(theirs, stack).layers):
                prefix = f"model.{stack}.layers.{n}."
                _attention(layer.self_attn, state, prefix + "self_attn.")
                if stack == "decoder":
                    _attention(layer.multihead_attn, state, prefix + "multihead_attn.")
                _ffn_and_norms(layer, state, prefix)
            norm = getattr(theirs, stack).norm
            norm.weight.copy_(state[f"model.{stack}.norm.weight"])
            norm.bias.copy_(state[f"model.{stack}.norm.bias"])
    return theirs


def batch() -> dict[str, torch.Tensor]:
    """B = 2, S = 16, T = 12, right padding."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (2, 16), generator=generator)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0
    labels = torch.randint(1, VOCAB, (2, 12), generator=generator)
    decoder_mask = torch.ones(2, 12, dtype=torch.long)
    decoder_mask[0, 9:] = 0
    return {
        "input_ids": ids * mask,
        "attention_mask": mask,
        "decoder_input_ids": torch.cat([torch.ones(2, 1, dtype=torch.long), labels[:, :-1]], 1),
        "decoder_attention_mask": decoder_mask,
        "labels": labels * decoder_mask,
        "loss_weight": decoder_mask / decoder_mask.sum() * 2,
    }


def test_transformer_logits_equal_torch_transformer() -> None:
    model = build()
    theirs = reference(model)
    b = batch()
    word = model.state_dict()["model.encoder_embeddings.word_embeddings.weight"]
    positions = table(POSITIONS, D)
    source = word[b["input_ids"]] + positions[:16]
    target = word[b["decoder_input_ids"]] + positions[:12]
    causal = torch.triu(torch.full((12, 12), float("-inf")), diagonal=1)
    padding = b["attention_mask"] == 0
    with torch.no_grad():
        hidden = theirs(
            source, target, tgt_mask=causal, src_key_padding_mask=padding,
            memory_key_padding_mask=padding,
        )  # fmt: skip
        expected = (hidden * D**-0.5) @ word.T
        ours = model.logits(b)["logits"]
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-5)


def test_transformer_position_table_is_frozen_and_interleaved() -> None:
    model = build()
    parameters = dict(model.named_parameters())
    for stack in ("encoder", "decoder"):
        fpe = parameters[f"model.{stack}_embeddings.position_embeddings.fpe"]
        assert not fpe.requires_grad
        torch.testing.assert_close(fpe, table(POSITIONS, D), atol=1e-6, rtol=0)


def test_transformer_parameter_names_are_model_zoo_s() -> None:
    names = {n for n, _ in build().named_parameters()}
    expected = {
        "model.encoder_embeddings.word_embeddings.weight",
        "model.encoder_embeddings.position_embeddings.fpe",
        "model.decoder_embeddings.position_embeddings.fpe",
        "model.encoder.norm.weight",
        "model.encoder.norm.bias",
        "model.decoder.norm.weight",
        "model.decoder.norm.bias",
    }
    for stack, norms, attentions in (
        ("encoder", 2, ("self_attn",)),
        ("decoder", 3, ("self_attn", "multihead_attn")),
    ):
        for n in range(2):
            layer = f"model.{stack}.layers.{n}."
            for attention in attentions:
                expected |= {
                    f"{layer}{attention}.proj_{p}_dense_layer.weight"
                    for p in ("q", "k", "v", "output")
                }
            for i in range(1, norms + 1):
                expected |= {f"{layer}norm{i}.weight", f"{layer}norm{i}.bias"}
            for i in (0, 1):
                expected |= {
                    f"{layer}ffn.ffn.{i}.linear_layer.weight",
                    f"{layer}ffn.ffn.{i}.linear_layer.bias",
                }
    assert names == expected


def test_transformer_loss_weights_tokens_by_the_loader_s_loss_weight() -> None:
    model = build()
    b = batch()
    with torch.no_grad():
        out = model(b)
        logits = model.logits(b)["logits"]
    ce = nn.functional.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), reduction="none")
    expected = (ce * (b["decoder_attention_mask"] * b["loss_weight"]).flatten()).sum() / 2
    torch.testing.assert_close(out["loss"], expected, atol=1e-6, rtol=1e-6)
