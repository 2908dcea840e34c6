"""muP of ``t5`` (Model Zoo's t5_11B_muP keys, shrunk): the scales and the learning-rate groups.

Under muP (w = d_model / mup_base_d_model) the embeddings are multiplied by
``embeddings_alpha sqrt(d_model)``, the scores by ``alpha / (d_kv w)`` (``scale_*_qk_dot_by_d``,
the q and k projection scales folded in), and the logits by ``output_logits_alpha / sqrt(w)``
instead of ``d_model^-1/2``. A muP model therefore equals a plain model with the same weights
whose ``embeddings_alpha`` and ``*_attention_logits_alpha`` carry those factors, its logits
rescaled.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from plugtrain import get_registry

D, DKV, W = 64, 16, 2.0
MUP: dict[str, Any] = {
    "src_vocab_size": 90,
    "extra_ids": 6,
    "encoder_num_hidden_layers": 2,
    "decoder_num_hidden_layers": 2,
    "dropout_rate": 0.0,
    "d_kv": DKV,
    "num_heads": 4,
    "use_projection_bias_in_attention": False,
    "position_embedding_type": "relative",
    "share_embedding_weights": True,
    "share_encoder_decoder_embedding": True,
    "norm_type": "layernorm",
    "d_ff": 128,
    "d_model": D,
    "encoder_nonlinearity": "relu",
    "decoder_nonlinearity": "relu",
    "layer_norm_epsilon": 1.0e-05,
    "lm_loss_weight": 0.015,
    "scale_encoder_qk_dot_by_d": True,
    "scale_decoder_qk_dot_by_d": True,
    "scale_output_logits_by_d": False,
    "encoder_attention_logits_alpha": 4.0,
    "decoder_attention_logits_alpha": 4.0,
    "mup_base_d_model": 32,
    "mup_base_d_ff": 64,
    "output_logits_alpha": 2.22,
    "embeddings_alpha": 14.6,
}


def build(**keys: Any) -> Any:
    """A t5 built through the registry, in eval mode."""
    torch.manual_seed(0)
    return get_registry().resolve("model", "t5")(**keys).eval()


def test_mup_model_equals_the_plain_model_with_its_scales_written_out() -> None:
    mup = build(**MUP)
    plain_keys = {
        k: v for k, v in MUP.items() if not k.startswith(("mup_", "scale_", "output_logits"))
    }
    plain = build(
        **{
            **plain_keys,
            "embeddings_alpha": 14.6 * math.sqrt(D),
            "encoder_attention_logits_alpha": 4.0 / (DKV * W),
            "decoder_attention_logits_alpha": 4.0 / (DKV * W),
        }
    )
    plain.load_state_dict(mup.state_dict())
    generator = torch.Generator().manual_seed(1)
    batch = {
        "input_ids": torch.randint(0, 96, (2, 16), generator=generator),
        "decoder_input_ids": torch.randint(0, 96, (2, 8), generator=generator),
    }
    with torch.no_grad():
        ours = mup.logits(batch)["logits"]
        reference = plain.logits(batch)["logits"] * (2.22 / math.sqrt(W)) / D**-0.5
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=1e-5)


def test_mup_learning_rate_factors_are_model_zoo_s() -> None:
    model = build(**MUP)
    root = W**-0.5
    assert model.learning_rate_factors() == {
        "embedding": root,
        "lm_head": root,
        "decoder_input_ffn": 1 / W,
        "encoder_input_ffn": 1 / W,
        "decoder_qkv_projection": root,
        "encoder_qkv_projection": root,
        "decoder_output_projection": root,
        "encoder_output_projection": root,
        "encoder_output_ffn": 64 / 128,
        "decoder_output_ffn": 64 / 128,
    }
    assert (
        build(**{**MUP, "mup_base_d_model": None, "mup_base_d_ff": None}).learning_rate_factors()
        == {}
    )


def test_mup_groups_name_the_parameters_model_zoo_s_globs_name() -> None:
    from fnmatch import fnmatchcase

    model = build(**MUP)
    names = [n for n, _ in model.named_parameters()]
    groups = model.lr_adjustment_groups

    def members(group: str) -> set[str]:
        return {n for n in names if any(fnmatchcase(n, g) for g in groups[group])}

    assert members("encoder_qkv_projection") == {
        f"model.encoder.layers.{n}.self_attn.proj_{p}_dense_layer.weight"
        for n in range(2)
        for p in "qkv"
    }
    assert len(members("decoder_qkv_projection")) == 12  # self and cross attention
    assert members("decoder_output_ffn") == {
        f"model.decoder.layers.{n}.ffn.ffn.1.linear_layer.weight" for n in range(2)
    }
    assert "model.encoder_embeddings.word_embeddings.weight" in members("embedding")


def test_mup_initialisation_scales_the_tables_by_d_model() -> None:
    table = build(**MUP).model.encoder_embeddings.word_embeddings.weight.detach()
    plain = build(**{**MUP, "mup_base_d_model": None, "mup_base_d_ff": None})
    plain_table = plain.model.encoder_embeddings.word_embeddings.weight.detach()
    assert abs(float(table.std()) - D**-0.5) < 0.02
    assert abs(float(plain_table.std()) - 1.0) < 0.1
