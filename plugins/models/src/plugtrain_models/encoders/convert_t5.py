"""Converters ``t5`` and ``transformer``: Hugging Face ``T5ForConditionalGeneration`` (torch-free).

A Hugging Face T5 is Model Zoo's ``t5`` with T5's own RMS norm (the section gets
``norm_type: rmsnorm``), relative positions, pre-LN blocks, no biases and one table shared by
both stacks (and ``lm_head`` when ``tie_word_embeddings``). Its ``vocab_size`` already counts
the sentinels: import writes ``extra_ids: 0``, export writes ``src_vocab_size + extra_ids``.
``transformer`` converts with the same rules (as Model Zoo's converter does), so only a
``transformer`` section with T5's layout exports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError, WeightRule

__all__ = ["T5", "TRANSFORMER"]

_FFN_FROM_HF = {"relu": "relu", "gelu": "gelu", "gated-relu": "reglu", "gated-silu": "swiglu"}
_FFN_TO_HF = {v: k for k, v in _FFN_FROM_HF.items()}


def _gated(context: Any) -> bool:
    return str(context.keys["encoder_nonlinearity"]).endswith("glu")


def _plain(context: Any) -> bool:
    return not _gated(context)


def _rules() -> tuple[WeightRule, ...]:
    rules = [
        WeightRule(["shared.weight"], ["encoder_embeddings.word_embeddings.weight"]),
        WeightRule(["encoder.embed_tokens.weight"], ["encoder_embeddings.word_embeddings.weight"]),
        WeightRule(["decoder.embed_tokens.weight"], ["decoder_embeddings.word_embeddings.weight"]),
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
    ]
    for stack in ("encoder", "decoder"):
        hf, ours = f"{stack}.block.{{layer}}.layer.", f"{stack}.layers.{{layer}}."
        rules.append(
            WeightRule(
                [f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                [f"{stack}_embeddings.position_embed_helper.relative_attention_bias.weight"],
            )
        )
        attentions = [("0.SelfAttention", "self_attn")]
        if stack == "decoder":
            attentions.append(("1.EncDecAttention", "multihead_attn"))
        for theirs, mine in attentions:
            for hf_name, our_name in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "output")):
                rules.append(
                    WeightRule(
                        [f"{hf}{theirs}.{hf_name}.weight"],
                        [f"{ours}{mine}.proj_{our_name}_dense_layer.weight"],
                    )
                )
        ffn = "1" if stack == "encoder" else "2"
        dense = f"{hf}{ffn}.DenseReluDense."
        rules += [
            WeightRule(
                [dense + "wi.weight"], [ours + "ffn.ffn.0.linear_layer.weight"], when=_plain
            ),
            WeightRule(
                [dense + "wi_0.weight"],
                [ours + "ffn.ffn.0.linear_layer_for_glu.weight"],
                when=_gated,
            ),
            WeightRule(
                [dense + "wi_1.weight"], [ours + "ffn.ffn.0.linear_layer.weight"], when=_gated
            ),
            WeightRule([dense + "wo.weight"], [ours + "ffn.ffn.1.linear_layer.weight"]),
        ]
        norms = ("norm1", "norm2") if stack == "encoder" else ("norm1", "norm2", "norm3")
        for index, norm in enumerate(norms):
            rules.append(WeightRule([f"{hf}{index}.layer_norm.weight"], [f"{ours}{norm}.weight"]))
        rules.append(WeightRule([f"{stack}.final_layer_norm.weight"], [f"{stack}.norm.weight"]))
    return tuple(rules)


def _from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    # transformers 5 always writes tie_word_embeddings: true and keeps the file's own value,
    # which also decides the d_model^-1/2 on the decoder output, as scale_decoder_outputs
    keys["share_embedding_weights"] = bool(
        hf.get("scale_decoder_outputs", hf.get("tie_word_embeddings", True))
    )
    keys["extra_ids"] = 0
    keys["tgt_vocab_size"] = None
    decoder = hf.get("num_decoder_layers")
    keys["decoder_num_hidden_layers"] = None if decoder is None else int(decoder)
    projection = str(hf.get("feed_forward_proj", "relu"))
    if projection not in _FFN_FROM_HF:
        known = ", ".join(_FFN_FROM_HF)
        message = (
            f"config.json: feed_forward_proj = {projection!r} is not supported ({known}; "
            "gated-gelu is the tanh GELU, which Model Zoo's T5 does not have)"
        )
        raise ConversionError(message)
    keys["encoder_nonlinearity"] = _FFN_FROM_HF[projection]
    keys["decoder_nonlinearity"] = None


def _to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    source = int(keys["src_vocab_size"])
    target = keys["tgt_vocab_size"]
    if target is not None and int(target) != source:
        message = "model.tgt_vocab_size differs from src_vocab_size: Hugging Face T5 has one table"
        raise ConversionError(message)
    hf["vocab_size"] = source + int(keys["extra_ids"])
    layers = keys["decoder_num_hidden_layers"]
    hf["num_decoder_layers"] = int(keys["encoder_num_hidden_layers"] if layers is None else layers)
    activation = keys["encoder_nonlinearity"]
    if activation not in _FFN_TO_HF:
        raise ConversionError(f"model.encoder_nonlinearity = {activation!r} has no T5 name")
    hf["feed_forward_proj"] = _FFN_TO_HF[activation]
    hf["relative_attention_max_distance"] = 128
    hf["tie_word_embeddings"] = bool(keys["share_embedding_weights"])
    hf["is_encoder_decoder"] = True


T5 = CheckpointConverter(
    model="t5",
    hf_model_types=["t5"],
    hf_architecture="T5ForConditionalGeneration",
    hf_prefix="",
    config=(
        ConfigKey("vocab_size", "src_vocab_size", 32128),
        ConfigKey("d_model", "d_model", 512),
        ConfigKey("d_kv", "d_kv", 64),
        ConfigKey("d_ff", "d_ff", 2048),
        ConfigKey("num_layers", "encoder_num_hidden_layers", 6),
        ConfigKey("num_heads", "num_heads", 8),
        ConfigKey("relative_attention_num_buckets", "relative_attention_num_buckets", 32),
        ConfigKey("dropout_rate", "dropout_rate", 0.1),
        ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", 1e-6),
        ConfigKey("initializer_factor", "initializer_factor", 1.0),
        ConfigKey("pad_token_id", "pad_token_id", 0),
        ConfigKey("decoder_start_token_id", "decoder_start_token_id", 0),
    ),
    weights=_rules(),
    plugtrain_fixed={
        "norm_type": "rmsnorm",
        "position_embedding_type": "relative",
        "use_pre_encoder_decoder_layer_norm": True,
        "share_encoder_decoder_embedding": True,
        "use_projection_bias_in_attention": False,
        "use_ffn_bias": False,
        "use_transformer_initialization": False,
    },
    hf_required={"relative_attention_max_distance": 128},
    hf_ignored={
        "feed_forward_proj",
        "num_decoder_layers",
        "dense_act_fn",
        "is_gated_act",
        "classifier_dropout",
        "n_positions",
        "output_past",
        "gradient_checkpointing",
        "scale_decoder_outputs",
        "tie_word_embeddings",
    },
    config_to_plugtrain=_from_hf,
    config_to_hf=_to_hf,
    lm_head=("lm_head.weight", "encoder_embeddings.word_embeddings.weight"),
    plugtrain_handled={
        "extra_ids",
        "tgt_vocab_size",
        "decoder_num_hidden_layers",
        "encoder_nonlinearity",
        "decoder_nonlinearity",
        "relu_dropout_rate",
        "use_pre_encoder_decoder_dropout",
        "use_dropout_outside_residual_path",
        "mlm_loss_scaling",
        "lm_loss_weight",
        "src_max_position_embeddings",
        "tgt_max_position_embeddings",
        "share_embedding_weights",
    },
    note="T5ForConditionalGeneration (T5's RMS norm: norm_type rmsnorm); the vocabulary "
    "includes the extra ids.",
)

TRANSFORMER = attrs.evolve(
    T5,
    model="transformer",
    detected=False,
    note="T5ForConditionalGeneration as a transformer section (Model Zoo converts the "
    "transformer with T5's rules); fixed positions and post-LN do not export.",
)
