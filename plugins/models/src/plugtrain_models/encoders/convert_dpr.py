"""Converter ``dpr``: Hugging Face's DPR question and context encoders as plugtrain's ``dpr``.

A Hugging Face DPR checkpoint is a folder with ``question_encoder/`` (``DPRQuestionEncoder``)
and ``ctx_encoder/`` (``DPRContextEncoder``); ``--config`` is ``question_encoder/config.json``
and the export writes the same two folders. Each encoder is a BERT encoder without pooler
(``projection_dim: 0``: the pooled output is the ``[CLS]`` state, ``pooler_type: cls``);
``question_encoder.bert_model.`` maps to ``question_encoder.`` and ``ctx_encoder.bert_model.``
to ``ctx_encoder.`` by BERT's rules. Both sections take the one ``config.json``'s keys, so a
section pair that differs does not export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError
from plugtrain.schema import validated_arguments
from plugtrain_models.encoders.converters_bert import encoder_config, encoder_rules
from plugtrain_models.encoders.schemas_dpr import DprEncoderArgs
from plugtrain_models.rules import number

__all__ = ["DPR"]

_ROWS = (
    *encoder_config(),
    ConfigKey("max_position_embeddings", "max_position_embeddings", 512),
    ConfigKey("pad_token_id", "pad_token_id", 0),
)
"""``DPRConfig`` keys and each encoder section's keys holding the same values."""

_FIXED: dict[str, Any] = {
    "position_embedding_type": "learned",
    "norm_first": False,
    "embedding_layer_norm": True,
    "use_final_layer_norm": False,
    "use_projection_bias_in_attention": True,
    "use_ffn_bias_in_attention": True,
    "use_ffn_bias": True,
    "attention_type": "scaled_dot_product",
    "mask_padding_in_positional_embed": False,
}
"""The encoder keys a Hugging Face BERT encoder implies."""


def _from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    if hf.get("position_embedding_type", "absolute") != "absolute":
        kind = hf["position_embedding_type"]
        raise ConversionError(f"config.json: position_embedding_type {kind!r} is not supported")
    section: dict[str, Any] = {}
    for row in _ROWS:
        value = hf.get(row.hf, row.default)
        section[row.plugtrain] = row.to_plugtrain(value) if row.to_plugtrain else value
    section.update(_FIXED)
    section["attention_dropout_rate"] = hf.get("attention_probs_dropout_prob", 0.1)
    keys["q_encoder"], keys["ctx_encoder"] = section, dict(section)
    keys["pooler_type"] = "cls"
    keys["use_biencoder"] = True


def _complete(keys: Mapping[str, Any], name: str) -> dict[str, Any]:
    section = keys.get(name) or keys.get("encoder")
    if section is None:
        raise ConversionError(f"model.{name} is missing")
    return validated_arguments(DprEncoderArgs, section, owner=f"dpr.{name}")


def _value(section: Mapping[str, Any], row: ConfigKey) -> Any:
    value = section[row.plugtrain]
    return row.to_hf(value) if row.to_hf else value


def _to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    if not keys["use_biencoder"]:
        message = "model.use_biencoder is false: Hugging Face DPR has two encoders"
        raise ConversionError(message)
    if keys["pooler_type"] != "cls":
        message = (
            f"model.pooler_type is {keys['pooler_type']!r}: Hugging Face DPR pools the [CLS] "
            "state (cls)"
        )
        raise ConversionError(message)
    question, context = _complete(keys, "q_encoder"), _complete(keys, "ctx_encoder")
    for name, section in (("q_encoder", question), ("ctx_encoder", context)):
        for key, value in _FIXED.items():
            if section[key] != value:
                message = (
                    f"model.{name}.{key} is {section[key]!r}, but Hugging Face DPR needs {value!r}"
                )
                raise ConversionError(message)
    for row in _ROWS:
        if _value(question, row) != _value(context, row):
            message = (
                f"model.q_encoder.{row.plugtrain} and ctx_encoder.{row.plugtrain} differ: the "
                "Hugging Face encoders share one config.json"
            )
            raise ConversionError(message)
        hf[row.hf] = _value(question, row)
    rate = question["attention_dropout_rate"]
    chosen = number(question["dropout_rate"] if rate is None else rate)
    hf["attention_probs_dropout_prob"] = 0.0 if chosen is None else chosen
    hf["position_embedding_type"] = "absolute"
    hf["projection_dim"] = 0


DPR = CheckpointConverter(
    model="dpr",
    hf_model_types=["dpr"],
    hf_architecture="DPRQuestionEncoder",
    hf_prefix="",
    config=(),
    weights=(
        *encoder_rules("question_encoder.bert_model.", "question_encoder."),
        *encoder_rules("ctx_encoder.bert_model.", "ctx_encoder."),
    ),
    hf_required={"projection_dim": 0},
    hf_ignored={row.hf for row in _ROWS}
    | {"attention_probs_dropout_prob", "position_embedding_type", "classifier_dropout"},
    config_to_plugtrain=_from_hf,
    config_to_hf=_to_hf,
    plugtrain_handled={
        "q_encoder",
        "ctx_encoder",
        "encoder",
        "use_biencoder",
        "pooler_type",
        "softmax_temperature",
        "mutual_information",
        "compute_eval_metrics",
        "selected_encoder",
    },
    hf_parts={"question_encoder": "DPRQuestionEncoder", "ctx_encoder": "DPRContextEncoder"},
    note="DPR: a folder with question_encoder/ (DPRQuestionEncoder) and ctx_encoder/ "
    "(DPRContextEncoder); --config is question_encoder/config.json.",
)
