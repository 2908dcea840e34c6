"""``GPT``: the former built-in model, now a configuration of the decoder (GPT-2 path).

Its run-file keys are unchanged; these tests pin what they map to and that the result behaves
as a plugtrain model (the conformance kit) and as GPT-2 (GPT-2's initialisation, the loss over
labels other than ``-100``). The CLI runs of ``examples/gpt.yaml`` are in ``tests/test_gpt.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

import plugtrain
from plugtrain.errors import ConfigError
from plugtrain.testing import check_model
from plugtrain_models.gpt import GPT
from plugtrain_models.model import DecoderLM

SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 8}


def test_gpt_is_registered_by_plugtrain_models():
    info = plugtrain.describe("model", "GPT")
    assert (info.distribution, info.target) == ("plugtrain-models", "plugtrain_models.gpt:GPT")
    assert [a.name for a in info.arguments] == [
        "vocab_size", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias",
        "tie_weights",
    ]  # fmt: skip


def test_gpts_keys_configure_the_gpt2_path_as_gpt2():
    model = GPT(vocab_size=100, n_layer=3, n_head=4, n_embd=32, block_size=24, dropout=0.25)
    assert isinstance(model, DecoderLM)
    s = model.settings
    assert (s.vocab_size, s.num_layers, s.num_heads, s.hidden_size) == (100, 3, 4, 32)
    assert (s.filter_size, s.max_positions, s.positions) == (128, 24, "learned")
    assert (s.activation, s.glu, s.norm_type, s.eps) == ("gelu", False, "layernorm", 1e-5)
    assert (s.dropout, s.attention_dropout, s.embedding_dropout) == (0.25, 0.25, 0.25)
    flags = (s.tied, s.ffn_bias, s.qkv_bias, s.out_bias, s.lm_head_bias, s.scaled, s.qk_by_d)
    assert flags == (True, True, True, True, False, True, False)
    assert (s.logits_scale, s.parallel) == (None, False)
    assert (s.loss_scaling, s.mup_width) == ("num_tokens", None)
    assert model.report_perplexity
    assert model.learning_rate_factors() == {}


def test_bias_false_drops_every_bias_and_the_head_can_be_untied():
    model = GPT(**SMALL, bias=False, tie_weights=False)
    names = [name for name, _ in model.named_parameters()]
    assert not [name for name in names if name.endswith("bias")]
    assert model.settings.norm_type == "biasless-layernorm"
    assert "model.lm_head.weight" in names


@torch.no_grad()
def test_gpt2s_initialisation():
    torch.manual_seed(0)
    model = GPT(n_layer=4, n_head=4, n_embd=128, block_size=64)
    layers = model.model.transformer_decoder.layers
    q = torch.cat([layer.self_attn.proj_q_dense_layer.weight.flatten() for layer in layers])
    out = torch.cat([layer.ffn.ffn[1].linear_layer.weight.flatten() for layer in layers])
    embedding = model.model.embedding_layer.word_embeddings.weight
    assert float(q.std()) == pytest.approx(0.02, rel=0.03)
    assert float(out.std()) == pytest.approx(0.02 / math.sqrt(8), rel=0.03)
    assert float(embedding.std()) == pytest.approx(0.02, rel=0.03)
    # normal, not Model Zoo's default truncated normal (which never exceeds 2 std)
    assert float(q.abs().max()) > 2 * 0.02
    assert not layers[0].ffn.ffn[0].linear_layer.bias.any()
    assert torch.equal(layers[0].norm1.weight, torch.ones(128))


def test_n_embd_must_split_into_the_heads():
    with pytest.raises(ConfigError, match=r"n_embd \(10\) must be a multiple of n_head \(4\)"):
        GPT(n_embd=10, n_head=4)


def test_gpt_passes_the_conformance_kit():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (3, 9), generator=generator)
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}
    check_model(plugtrain.resolve("model", "GPT"), SMALL, inputs=batch, name="GPT")
