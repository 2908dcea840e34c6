"""A BERT-family section's validated keys resolved into what the modules read (torch-free).

Defaults that depend on other keys (``null`` dropouts and activations, the segment table, the
pooler, ``rotary_dim``, muP's scales) are settled here once, as Model Zoo's ``post_init`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain_models.rules import number

__all__ = ["BertSettings", "resolve_bert"]


@attrs.frozen
class BertSettings:
    """Everything a BERT encoder and its heads need, settled once from the keys."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    filter_size: int
    max_positions: int | None
    positions: str | None
    padded_positions: bool
    rotary_dim: int
    rope_theta: float
    num_segments: int
    pad_token_id: int
    activation: str
    pooler_activation: str
    mlm_activation: str
    dropout: float
    attention_dropout: float
    embedding_dropout: float
    eps: float
    norm_first: bool
    embedding_norm: bool
    final_norm: bool
    qkv_bias: bool
    out_bias: bool
    ffn_bias: bool
    mlm_ffn_bias: bool
    mlm_output_bias: bool
    pooler: bool
    tied: bool
    qk_scale: str
    attention_alpha: float
    embeddings_scale: float
    output_logits_scale: float | None
    mup_width: float | None
    mup_filter: float | None
    initializer_range: float
    token_dropout: bool
    mask_token_id: int | None

    @property
    def head_dim(self) -> int:
        """Width of each attention head."""
        return self.hidden_size // self.num_heads


def _rate(value: Any, fallback: Any) -> float:
    chosen = number(value)
    return float(number(fallback) or 0.0) if chosen is None else chosen


def _output_logits_scale(keys: Mapping[str, Any]) -> float | None:
    base = number(keys["mup_base_hidden_size"])
    if not base:
        return None
    width = keys["hidden_size"] / base
    alpha = float(number(keys["output_logits_alpha"]) or 1.0)
    return alpha / width if keys["scale_output_logits_by_d"] else alpha / math.sqrt(width)


def resolve_bert(keys: Mapping[str, Any], *, pretraining: bool, pooler: bool) -> BertSettings:
    """The settings of a validated section (every field present).

    :param pretraining: ``bert``/``esm2`` (MLM head; the embedding dropout is ``dropout_rate``).
    :param pooler: whether the encoder has its pooler (``bert`` with NSP, ``bert/classifier``).
    """
    heads = keys["num_heads"]
    head_dim = keys["hidden_size"] // heads
    mup = bool(number(keys["mup_base_hidden_size"]))
    by_d = keys["scale_qk_dot_by_d"]
    by_d = mup if by_d is None else by_d
    scaled = keys["attention_type"] == "scaled_dot_product"
    segments = keys["num_segments"]
    if segments is None:
        segments = 0 if keys.get("disable_nsp", False) else 2
    activation = keys["encoder_nonlinearity"]
    dropout = float(number(keys["dropout_rate"]) or 0.0)
    embedding_dropout = dropout if pretraining else _rate(keys["embedding_dropout_rate"], dropout)
    rotary_dim = keys["rotary_dim"] or int(head_dim * 0.25)
    return BertSettings(
        vocab_size=keys["vocab_size"],
        hidden_size=keys["hidden_size"],
        num_layers=keys["num_hidden_layers"],
        num_heads=heads,
        filter_size=keys["filter_size"],
        max_positions=keys["max_position_embeddings"],
        positions=keys["position_embedding_type"],
        padded_positions=keys["mask_padding_in_positional_embed"],
        rotary_dim=rotary_dim,
        rope_theta=float(number(keys["rope_theta"]) or 10000.0),
        num_segments=segments,
        pad_token_id=keys.get("pad_token_id", 0),
        activation=activation,
        pooler_activation=keys["pooler_nonlinearity"] or activation,
        mlm_activation=keys.get("mlm_nonlinearity") or activation,
        dropout=dropout,
        attention_dropout=_rate(keys["attention_dropout_rate"], dropout),
        embedding_dropout=embedding_dropout,
        eps=float(number(keys["layer_norm_epsilon"]) or 0.0),
        norm_first=keys["norm_first"],
        embedding_norm=keys["embedding_layer_norm"],
        final_norm=keys["use_final_layer_norm"],
        qkv_bias=keys["use_projection_bias_in_attention"],
        out_bias=keys["use_ffn_bias_in_attention"],
        ffn_bias=keys["use_ffn_bias"],
        mlm_ffn_bias=keys.get("use_ffn_bias_in_mlm", True),
        mlm_output_bias=keys.get("use_output_bias_in_mlm", True),
        pooler=pooler,
        tied=bool(keys.get("share_embedding_weights", True)) if pretraining else False,
        qk_scale=("d" if by_d else "sqrt_d") if scaled else "none",
        attention_alpha=float(number(keys["attention_logits_alpha"]) or 1.0),
        embeddings_scale=float(number(keys["embeddings_scale"]) or 1.0),
        output_logits_scale=_output_logits_scale(keys) if pretraining else None,
        mup_width=keys["hidden_size"] / number(keys["mup_base_hidden_size"]) if mup else None,
        mup_filter=(
            keys["filter_size"] / float(number(keys["mup_base_filter_size"]) or 1.0)
            if number(keys["mup_base_filter_size"])
            else None
        ),
        initializer_range=float(number(keys["initializer_range"]) or 0.0),
        token_dropout=bool(keys.get("token_dropout", False)),
        mask_token_id=keys.get("mask_token_id"),
    )
