"""ESM-2: transformers' ``EsmForMaskedLM`` as plugtrain's ``esm2`` (key ``esm-2``, Model Zoo's).

Pre-LN blocks (``attention.LayerNorm`` -> ``norm1``, ``LayerNorm`` -> ``norm2``), the final
``emb_layer_norm_after``, the MLM head, and q/k rows reordered per head from rotate-half to
interleaved pairs. transformers writes the blocks' LayerNorms as ``gamma``/``beta``; import
reads either spelling, export writes that one. The contact head has no Model Zoo counterpart:
dropped on import, zeros on export; the rotary buffers are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError, WeightRule
from plugtrain_models.encoders.converter_transforms import RotaryPairs, WithZeros
from plugtrain_models.encoders.converters_bert import encoder_config, mlm_rules

__all__ = ["ESM2"]

_HF = "esm.encoder.layer.{layer}."
_OURS = "bert_encoder.transformer_encoder.layers.{layer}."


def _norm(hf: str, ours: str) -> list[WeightRule]:
    """Both spellings of a block LayerNorm (the first is the one export writes)."""
    return [
        WeightRule([hf + ".gamma"], [ours + ".weight"]),
        WeightRule([hf + ".beta"], [ours + ".bias"]),
        WeightRule([hf + ".weight"], [ours + ".weight"]),
        WeightRule([hf + ".bias"], [ours + ".bias"]),
    ]


def _layer_rules() -> list[WeightRule]:
    rules: list[WeightRule] = []
    for theirs, name in (("query", "q"), ("key", "k"), ("value", "v")):
        for suffix in ("weight", "bias"):
            rules.append(
                WeightRule(
                    [_HF + f"attention.self.{theirs}.{suffix}"],
                    [_OURS + f"self_attn.proj_{name}_dense_layer.{suffix}"],
                    RotaryPairs() if name != "v" else None,
                )
            )
    for suffix in ("weight", "bias"):
        rules += [
            WeightRule(
                [_HF + f"attention.output.dense.{suffix}"],
                [_OURS + f"self_attn.proj_output_dense_layer.{suffix}"],
            ),
            WeightRule(
                [_HF + f"intermediate.dense.{suffix}"], [_OURS + f"ffn.ffn.0.linear_layer.{suffix}"]
            ),
            WeightRule(
                [_HF + f"output.dense.{suffix}"], [_OURS + f"ffn.ffn.1.linear_layer.{suffix}"]
            ),
        ]
    rules += _norm(_HF + "attention.LayerNorm", _OURS + "norm1")
    rules += _norm(_HF + "LayerNorm", _OURS + "norm2")
    rules.append(WeightRule([_HF + "attention.self.rotary_embeddings.inv_freq"], []))
    return rules


def _contact_head(keys: Mapping[str, Any]) -> list[tuple[int, ...]]:
    return [(1, int(keys["num_hidden_layers"]) * int(keys["num_heads"])), (1,)]


_FINAL = "esm.encoder.emb_layer_norm_after."
_WEIGHTS = [
    WeightRule(
        ["esm.embeddings.word_embeddings.weight"],
        ["bert_encoder.embedding_layer.word_embeddings.weight"],
    ),
    *_layer_rules(),
    WeightRule(
        [
            _FINAL + "weight",
            "esm.contact_head.regression.weight",
            "esm.contact_head.regression.bias",
        ],
        ["bert_encoder.transformer_encoder.norm.weight"],
        WithZeros(_contact_head),
    ),
    WeightRule([_FINAL + "bias"], ["bert_encoder.transformer_encoder.norm.bias"]),
    *mlm_rules("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder"),
    WeightRule(["esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq"], []),
    WeightRule(["esm.embeddings.position_ids"], []),
]


def _from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    if hf.get("position_embedding_type", "absolute") != "rotary":
        kind = hf.get("position_embedding_type", "absolute")
        raise ConversionError(f"config.json: position_embedding_type {kind!r}: esm2 is rotary")
    if hf.get("emb_layer_norm_before"):
        raise ConversionError("config.json: emb_layer_norm_before is not supported (esm2 has none)")
    if hf.get("is_folding_model"):
        raise ConversionError("config.json: an ESMFold model is not an EsmForMaskedLM")
    keys["attention_dropout_rate"] = hf.get("attention_probs_dropout_prob", 0.0)
    keys["rotary_dim"] = int(keys["hidden_size"]) // int(keys["num_heads"])


def _to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    head = int(keys["hidden_size"]) // int(keys["num_heads"])
    if keys.get("rotary_dim") not in (None, head):
        raise ConversionError(
            f"model.rotary_dim {keys['rotary_dim']} is not the head size {head}: Hugging Face "
            "ESM rotates whole heads"
        )
    activation = keys.get("mlm_nonlinearity") or keys["encoder_nonlinearity"]
    if keys["encoder_nonlinearity"] != "gelu" or activation != "gelu":
        raise ConversionError("Hugging Face ESM uses gelu in the encoder and the MLM head")
    rate = keys.get("attention_dropout_rate")
    hf["attention_probs_dropout_prob"] = float(keys["dropout_rate"] if rate is None else rate)
    hf["position_embedding_type"] = "rotary"
    hf["emb_layer_norm_before"] = False
    hf["hidden_act"] = "gelu"


ESM2 = CheckpointConverter(
    model="esm2",
    hf_model_types=["esm"],
    hf_architecture="EsmForMaskedLM",
    hf_prefix="esm.",
    config=[
        *(row for row in encoder_config(segments=False) if row.hf != "hidden_act"),
        ConfigKey("max_position_embeddings", "max_position_embeddings", 1026),
        ConfigKey("pad_token_id", "pad_token_id", 1),
        ConfigKey("mask_token_id", "mask_token_id", 32),
        ConfigKey("token_dropout", "token_dropout", False),
        ConfigKey("rope_theta", "rope_theta", 10000.0, to_hf=float),
        ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ],
    weights=_WEIGHTS,
    plugtrain_fixed={
        "position_embedding_type": "rotary",
        "norm_first": True,
        "embedding_layer_norm": False,
        "use_final_layer_norm": True,
        "disable_nsp": True,
        "encoder_nonlinearity": "gelu",
        "use_projection_bias_in_attention": True,
        "use_ffn_bias_in_attention": True,
        "use_ffn_bias": True,
        "attention_type": "scaled_dot_product",
    },
    hf_required={"hidden_act": "gelu"},
    hf_ignored=frozenset(
        {
            "position_embedding_type",
            "emb_layer_norm_before",
            "is_folding_model",
            "esmfold_config",
            "vocab_list",
            "classifier_dropout",
            "attention_probs_dropout_prob",
        }
    ),
    config_to_plugtrain=_from_hf,
    config_to_hf=_to_hf,
    plugtrain_handled=frozenset(
        {
            "rotary_dim",
            "mlm_nonlinearity",
            "mlm_loss_weight",
            "attention_dropout_rate",
            "embedding_dropout_rate",
            "pooler_nonlinearity",
            "num_segments",
        }
    ),
    note="ESM-2 (EsmForMaskedLM); q/k rows reordered per head; the contact head is dropped.",
)
