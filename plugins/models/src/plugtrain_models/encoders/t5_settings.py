"""A ``t5`` / ``transformer`` section resolved into what the network needs (Model Zoo's rules).

The vocabularies gain ``extra_ids``; null keys take Model Zoo's fallbacks; muP and the transformer
initialisation decide the attention scale, the embedding scale and the logits scale.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["T5Settings", "resolve_t5_settings"]

log = logging.getLogger("plugtrain_models.encoders")


@dataclass(frozen=True)
class T5Settings:
    """Everything the T5 network and its loss read, resolved from the section's keys."""

    src_vocab: int
    tgt_vocab: int
    d_model: int
    d_kv: int
    d_ff: int
    num_heads: int
    encoder_layers: int
    decoder_layers: int
    num_buckets: int
    norm_type: str
    eps: float
    dropout: float
    relu_dropout: float
    activation: str
    qkv_bias: bool
    ffn_bias: bool
    position_embedding_type: str | None
    src_positions: int | None
    tgt_positions: int | None
    norm_first: bool
    pre_dropout: bool
    dropout_outside_residual: bool
    share_encoder_decoder: bool
    share_embedding: bool
    transformer_init: bool
    initializer_factor: float
    mup_width: float | None
    mup_base_d_ff: float | None
    encoder_scale: float
    decoder_scale: float
    encoder_alpha: float
    decoder_alpha: float
    embeddings_scale: float
    output_logits_scale: float | None
    pad_token_id: int
    decoder_start_token_id: int
    loss_scaling: str
    lm_loss_weight: float
    label_smoothing: float
    compute_eval_metrics: bool

    @property
    def logits_factor(self) -> float | None:
        """What the decoder output is multiplied by before ``lm_head`` (``None``: nothing)."""
        if self.share_embedding and self.output_logits_scale is None:
            return self.d_model**-0.5
        return None


def _score_scale(keys: Mapping[str, Any], by_d_key: str, mup: bool) -> float:
    """``c`` of the scores: 1 (T5's dot product), ``1/sqrt(d_kv)`` or ``1/d_kv``.

    Under muP the q and k projection scales ``w^-1/2`` fold in as ``1/w``.
    """
    scaled = bool(
        keys["use_transformer_initialization"] or keys["mup_base_d_model"] or keys["mup_base_d_ff"]
    )
    by_d = keys[by_d_key]
    by_d = mup if by_d is None else bool(by_d)
    d_kv = int(keys["d_kv"])
    scale = 1.0
    if scaled:
        scale /= math.sqrt(d_kv)
        if by_d:
            scale /= math.sqrt(d_kv)
    if mup:
        scale /= int(keys["d_model"]) / float(keys["mup_base_d_model"])
    return scale


def resolve_t5_settings(keys: Mapping[str, Any]) -> T5Settings:
    """The settings of complete, validated keys (every default filled in)."""
    extra = int(keys["extra_ids"])
    src = int(keys["src_vocab_size"]) + extra
    tgt = int(keys["tgt_vocab_size"]) + extra if keys["tgt_vocab_size"] else src
    d_model = int(keys["d_model"])
    mup = bool(keys["mup_base_d_model"]) and not keys["use_transformer_initialization"]
    width = d_model / float(keys["mup_base_d_model"]) if mup else None
    dropout = float(keys["dropout_rate"])
    relu_dropout = keys["relu_dropout_rate"]
    activation = str(keys["encoder_nonlinearity"])
    decoder_activation = keys["decoder_nonlinearity"] or activation
    ffn_bias = bool(keys["use_ffn_bias"])
    if ffn_bias and "gelu" in (activation, decoder_activation):
        log.warning("use_ffn_bias is turned off: Model Zoo's T5 has no FFN bias with gelu")
        ffn_bias = False
    embeddings_scale = float(keys["embeddings_alpha"] if keys["embeddings_alpha"] else 1.0)
    logits_scale = None
    if width is not None:
        embeddings_scale *= math.sqrt(d_model)
        alpha = float(keys["output_logits_alpha"] or 1.0)
        logits_scale = alpha / (width if keys["scale_output_logits_by_d"] else math.sqrt(width))
    decoder_layers = keys["decoder_num_hidden_layers"]
    start = keys["decoder_start_token_id"]
    return T5Settings(
        src_vocab=src,
        tgt_vocab=tgt,
        d_model=d_model,
        d_kv=int(keys["d_kv"]),
        d_ff=int(keys["d_ff"]),
        num_heads=int(keys["num_heads"]),
        encoder_layers=int(keys["encoder_num_hidden_layers"]),
        decoder_layers=int(
            keys["encoder_num_hidden_layers"] if decoder_layers is None else decoder_layers
        ),
        num_buckets=int(keys["relative_attention_num_buckets"]),
        norm_type=str(keys["norm_type"]),
        eps=float(keys["layer_norm_epsilon"]),
        dropout=dropout,
        relu_dropout=dropout if relu_dropout is None else float(relu_dropout),
        activation=activation,
        qkv_bias=bool(keys["use_projection_bias_in_attention"]),
        ffn_bias=ffn_bias,
        position_embedding_type=keys["position_embedding_type"],
        src_positions=keys["src_max_position_embeddings"],
        tgt_positions=keys["tgt_max_position_embeddings"],
        norm_first=bool(keys["use_pre_encoder_decoder_layer_norm"]),
        pre_dropout=bool(keys["use_pre_encoder_decoder_dropout"]),
        dropout_outside_residual=bool(keys["use_dropout_outside_residual_path"]),
        share_encoder_decoder=bool(keys["share_encoder_decoder_embedding"]),
        share_embedding=bool(keys["share_embedding_weights"]),
        transformer_init=bool(keys["use_transformer_initialization"]),
        initializer_factor=float(keys["initializer_factor"]),
        mup_width=width,
        mup_base_d_ff=float(keys["mup_base_d_ff"]) if mup and keys["mup_base_d_ff"] else None,
        encoder_scale=_score_scale(keys, "scale_encoder_qk_dot_by_d", mup),
        decoder_scale=_score_scale(keys, "scale_decoder_qk_dot_by_d", mup),
        encoder_alpha=float(keys["encoder_attention_logits_alpha"]),
        decoder_alpha=float(keys["decoder_attention_logits_alpha"]),
        embeddings_scale=embeddings_scale,
        output_logits_scale=logits_scale,
        pad_token_id=int(keys["pad_token_id"]),
        decoder_start_token_id=int(keys["pad_token_id"] if start is None else start),
        loss_scaling=str(keys["mlm_loss_scaling"]),
        lm_loss_weight=float(keys["lm_loss_weight"]),
        label_smoothing=float(keys["label_smoothing"]),
        compute_eval_metrics=bool(keys["compute_eval_metrics"]),
    )
