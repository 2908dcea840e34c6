"""BERT, its two fine-tuning heads and RoBERTa: transformers' classes as plugtrain's models.

``bert`` (``BertForPreTraining`` <-> ``bert``), ``bert-sequence-classifier``
(``BertForSequenceClassification`` <-> ``bert/classifier``), ``bert-token-classifier``
(``BertForTokenClassification`` <-> ``bert/token_classifier``) and ``roberta``
(``RobertaForMaskedLM`` <-> ``bert`` with ``disable_nsp`` and padding-aware positions). The
encoder's names map as Model Zoo's converters map them (:func:`encoder_rules`, which DPR reuses).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError, WeightRule
from plugtrain_models.encoders.converter_transforms import RobertaPositions
from plugtrain_models.rules import number

__all__ = [
    "BERT",
    "BERT_SEQUENCE_CLASSIFIER",
    "BERT_TOKEN_CLASSIFIER",
    "ROBERTA",
    "encoder_config",
    "encoder_rules",
    "mlm_rules",
]

WB = ("weight", "bias")


def _pairs(hf: str, ours: str, suffixes: tuple[str, ...] = WB) -> list[WeightRule]:
    return [WeightRule([f"{hf}.{s}"], [f"{ours}.{s}"]) for s in suffixes]


def _norms(hf: str, ours: str) -> list[WeightRule]:
    """A LayerNorm: ``weight``/``bias`` (what export writes), or old files' ``gamma``/``beta``."""
    old = [
        WeightRule([f"{hf}.gamma"], [f"{ours}.weight"]),
        WeightRule([f"{hf}.beta"], [f"{ours}.bias"]),
    ]
    return [*_pairs(hf, ours), *old]


def encoder_rules(hf: str, ours: str, *, positions: bool = True) -> list[WeightRule]:
    """A post-LN BERT encoder: HF names under ``hf`` (``"bert."``) as Model Zoo's under ``ours``.

    :param positions: map the learned position and segment tables one to one (RoBERTa folds
        them with its own rule).
    """
    layer, mine = hf + "encoder.layer.{layer}.", ours + "transformer_encoder.layers.{layer}."
    rules = _pairs(
        hf + "embeddings.word_embeddings", ours + "embedding_layer.word_embeddings", ("weight",)
    )
    if positions:
        rules += _pairs(
            hf + "embeddings.position_embeddings",
            ours + "embedding_layer.position_embeddings.embed",
            ("weight",),
        )
        rules += _pairs(
            hf + "embeddings.token_type_embeddings", ours + "embedding_layer.segment_embeddings",
            ("weight",),
        )  # fmt: skip
    rules += _norms(hf + "embeddings.LayerNorm", ours + "embed_ln_f")
    for theirs, name in (("query", "q"), ("key", "k"), ("value", "v")):
        rules += _pairs(
            layer + f"attention.self.{theirs}", mine + f"self_attn.proj_{name}_dense_layer"
        )
    rules += _pairs(layer + "attention.output.dense", mine + "self_attn.proj_output_dense_layer")
    rules += _norms(layer + "attention.output.LayerNorm", mine + "norm1")
    rules += _pairs(layer + "intermediate.dense", mine + "ffn.ffn.0.linear_layer")
    rules += _pairs(layer + "output.dense", mine + "ffn.ffn.1.linear_layer")
    rules += _norms(layer + "output.LayerNorm", mine + "norm2")
    rules += _pairs(hf + "pooler.dense", ours + "pooler.pooler.ffn.0.linear_layer")
    rules.append(WeightRule([hf + "embeddings.position_ids"], []))
    return rules


def mlm_rules(dense: str, norm: str, bias: str, decoder: str) -> list[WeightRule]:
    """The MLM head: transform, LayerNorm, output bias; the decoder weight is the word table."""
    head = "bert_mlm_head."
    rules = _pairs(dense, head + "mlm_transform.ffn.ffn.0.linear_layer")
    rules += _norms(norm, head + "mlm_transform.ln")
    rules.append(WeightRule([bias], [head + "classifier.ffn.0.linear_layer.bias"]))
    rules.append(WeightRule([decoder + ".weight"], [head + "classifier.ffn.0.linear_layer.weight"]))
    rules.append(WeightRule([decoder + ".bias"], []))  # the same tensor as ``bias``
    return rules


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def encoder_config(segments: bool = True) -> list[ConfigKey]:
    """``BertConfig`` keys and the encoder section's keys holding the same values."""
    rows = [
        ConfigKey("vocab_size", "vocab_size", 30522),
        ConfigKey("hidden_size", "hidden_size", 768),
        ConfigKey("num_hidden_layers", "num_hidden_layers", 12),
        ConfigKey("num_attention_heads", "num_heads", 12),
        ConfigKey("intermediate_size", "filter_size", 3072),
        ConfigKey("hidden_act", "encoder_nonlinearity", "gelu"),
        ConfigKey("hidden_dropout_prob", "dropout_rate", 0.1, to_hf=_float),
        ConfigKey("layer_norm_eps", "layer_norm_epsilon", 1e-12, to_hf=_float),
        ConfigKey("initializer_range", "initializer_range", 0.02, to_hf=_float),
    ]
    if segments:
        rows.append(ConfigKey("type_vocab_size", "num_segments", 2))
    return rows


_ENCODER_FIXED: dict[str, Any] = {
    "position_embedding_type": "learned",
    "norm_first": False,
    "embedding_layer_norm": True,
    "use_final_layer_norm": False,
    "use_projection_bias_in_attention": True,
    "use_ffn_bias_in_attention": True,
    "use_ffn_bias": True,
    "attention_type": "scaled_dot_product",
}
_IGNORED = frozenset(
    {"classifier_dropout", "gradient_checkpointing", "attention_probs_dropout_prob"}
)


def _attention_dropout_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    keys["attention_dropout_rate"] = hf.get("attention_probs_dropout_prob", 0.1)
    if hf.get("position_embedding_type", "absolute") != "absolute":
        kind = hf["position_embedding_type"]
        raise ConversionError(f"config.json: position_embedding_type {kind!r} is not supported")


def _attention_dropout_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    rate = keys.get("attention_dropout_rate")
    chosen = number(keys["dropout_rate"] if rate is None else rate)
    hf["attention_probs_dropout_prob"] = 0.0 if chosen is None else chosen
    hf["position_embedding_type"] = "absolute"


def _mlm_activation_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    chosen = keys.get("mlm_nonlinearity")
    if chosen is not None and chosen != keys["encoder_nonlinearity"]:
        message = (
            f"model.mlm_nonlinearity {chosen!r} differs from encoder_nonlinearity: Hugging Face "
            "uses hidden_act in the MLM head too"
        )
        raise ConversionError(message)


def _pretraining_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    _attention_dropout_from_hf(hf, keys)


def _pretraining_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    _attention_dropout_to_hf(keys, hf)
    _mlm_activation_to_hf(keys, hf)


_PRETRAINING_HANDLED = frozenset({
    "mlm_loss_weight", "mlm_nonlinearity", "embedding_dropout_rate", "attention_dropout_rate",
    "pooler_nonlinearity",
})  # fmt: skip

BERT = CheckpointConverter(
    model="bert",
    hf_model_types=["bert"],
    hf_architecture="BertForPreTraining",
    hf_prefix="bert.",
    config=[
        *encoder_config(),
        ConfigKey("max_position_embeddings", "max_position_embeddings", 512),
        ConfigKey("pad_token_id", "pad_token_id", 0),
        ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ],
    weights=[
        *encoder_rules("bert.", "bert_encoder."),
        *mlm_rules(
            "cls.predictions.transform.dense",
            "cls.predictions.transform.LayerNorm",
            "cls.predictions.bias",
            "cls.predictions.decoder",
        ),
        *_pairs("cls.seq_relationship", "bert_cls_head.classifier.ffn.0.linear_layer"),
    ],
    plugtrain_fixed={
        **_ENCODER_FIXED,
        "pooler_nonlinearity": "tanh",
        "disable_nsp": False,
        "mask_padding_in_positional_embed": False,
        "num_classes": 2,
    },
    hf_ignored=_IGNORED,
    config_to_plugtrain=_pretraining_from_hf,
    config_to_hf=_pretraining_to_hf,
    plugtrain_handled=_PRETRAINING_HANDLED,
    note="BERT with its MLM and NSP heads (BertForPreTraining).",
)


def _roberta_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    _attention_dropout_from_hf(hf, keys)
    pad = int(hf.get("pad_token_id", 1))
    keys["max_position_embeddings"] = int(hf.get("max_position_embeddings", 514)) - pad - 1
    if int(hf.get("type_vocab_size", 1)) != 1:
        raise ConversionError("config.json: RoBERTa with type_vocab_size other than 1")


def _roberta_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    _pretraining_to_hf(keys, hf)
    hf["max_position_embeddings"] = (
        int(keys["max_position_embeddings"]) + int(keys["pad_token_id"]) + 1
    )
    hf["type_vocab_size"] = 1


ROBERTA = CheckpointConverter(
    model="bert",
    hf_model_types=["roberta"],
    hf_architecture="RobertaForMaskedLM",
    hf_prefix="roberta.",
    config=[
        *encoder_config(segments=False),
        ConfigKey("pad_token_id", "pad_token_id", 1),
        ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ],
    weights=[
        WeightRule(
            [
                "roberta.embeddings.position_embeddings.weight",
                "roberta.embeddings.token_type_embeddings.weight",
            ],
            ["bert_encoder.embedding_layer.position_embeddings.embed.weight"],
            RobertaPositions(),
        ),
        *encoder_rules("roberta.", "bert_encoder.", positions=False),
        *mlm_rules("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder"),
    ],
    plugtrain_fixed={
        **_ENCODER_FIXED,
        "disable_nsp": True,
        "mask_padding_in_positional_embed": True,
    },
    hf_ignored=_IGNORED | {"max_position_embeddings", "type_vocab_size"},
    config_to_plugtrain=_roberta_from_hf,
    config_to_hf=_roberta_to_hf,
    plugtrain_handled=_PRETRAINING_HANDLED | {"max_position_embeddings", "num_segments"},
    note="RoBERTa (RobertaForMaskedLM) as bert with disable_nsp and padding-aware positions.",
)


def _labels_from_hf(hf: Mapping[str, Any]) -> int:
    labels = hf.get("id2label")
    return len(labels) if isinstance(labels, Mapping) and labels else int(hf.get("num_labels", 2))


def _labels_to_hf(count: int, hf: dict[str, Any]) -> None:
    hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(count)}
    hf["label2id"] = {f"LABEL_{i}": i for i in range(count)}


def _dropout_from_hf(hf: Mapping[str, Any]) -> Any:
    chosen = hf.get("classifier_dropout")
    return hf.get("hidden_dropout_prob", 0.1) if chosen is None else chosen


def _sequence_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    _attention_dropout_from_hf(hf, keys)
    keys["num_labels"] = _labels_from_hf(hf)
    keys["problem_type"] = hf.get("problem_type") or "single_label_classification"
    keys["task_dropout"] = _dropout_from_hf(hf)


def _sequence_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    _attention_dropout_to_hf(keys, hf)
    _labels_to_hf(int(keys["num_labels"]), hf)
    hf["problem_type"] = keys["problem_type"]
    hf["classifier_dropout"] = float(number(keys["task_dropout"]) or 0.0)


_HEAD_HANDLED = frozenset({
    "mlm_loss_weight", "mlm_nonlinearity", "share_embedding_weights", "embedding_dropout_rate",
    "attention_dropout_rate", "pooler_nonlinearity",
})  # fmt: skip
_HEAD_CONFIG = [
    *encoder_config(),
    ConfigKey("max_position_embeddings", "max_position_embeddings", 512),
]

BERT_SEQUENCE_CLASSIFIER = CheckpointConverter(
    model="bert/classifier",
    hf_model_types=["bert"],
    hf_architecture="BertForSequenceClassification",
    hf_prefix="bert.",
    config=_HEAD_CONFIG,
    weights=[*encoder_rules("bert.", "bert."), *_pairs("classifier", "classifier")],
    plugtrain_fixed={**_ENCODER_FIXED, "pooler_nonlinearity": "tanh"},
    hf_ignored=_IGNORED | {"tie_word_embeddings"},
    config_to_plugtrain=_sequence_from_hf,
    config_to_hf=_sequence_to_hf,
    plugtrain_handled=_HEAD_HANDLED | {"num_labels", "problem_type", "task_dropout"},
    note="BERT sequence classifier (BertForSequenceClassification) as bert/classifier.",
)


def _token_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    _attention_dropout_from_hf(hf, keys)
    keys["num_classes"] = _labels_from_hf(hf)
    keys["encoder_output_dropout_rate"] = _dropout_from_hf(hf)


def _token_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    _attention_dropout_to_hf(keys, hf)
    _labels_to_hf(int(keys["num_classes"]), hf)
    hf["classifier_dropout"] = float(number(keys["encoder_output_dropout_rate"]) or 0.0)


BERT_TOKEN_CLASSIFIER = CheckpointConverter(
    model="bert/token_classifier",
    hf_model_types=["bert"],
    hf_architecture="BertForTokenClassification",
    hf_prefix="bert.",
    config=_HEAD_CONFIG,
    weights=[*encoder_rules("bert.", "bert."), *_pairs("classifier", "classifier")],
    plugtrain_fixed=_ENCODER_FIXED,
    hf_ignored=_IGNORED | {"tie_word_embeddings"},
    config_to_plugtrain=_token_from_hf,
    config_to_hf=_token_to_hf,
    plugtrain_handled=_HEAD_HANDLED
    | {
        "num_classes",
        "encoder_output_dropout_rate",
        "loss_weight",
        "include_padding_in_loss",
        "label_vocab_file",
    },
    note="BERT token classifier (BertForTokenClassification) as bert/token_classifier.",
)
