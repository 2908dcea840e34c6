"""A decoder's validated keys resolved into the numbers its layers use (torch-free).

:class:`DecoderSettings` is what the modules read: defaults that depend on other keys (``null``
dropouts, ``rotary_dim``, muP's scales) are settled here once, as Model Zoo settles them.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain_models.rules import GLU_ACTIVATIONS, MOE_DEFAULTS, number

__all__ = ["DecoderSettings", "MoESettings", "resolve_settings"]


@attrs.frozen
class MoESettings:
    """The ``moe:`` mapping with Model Zoo's defaults filled in."""

    num_experts: int
    top_k: int
    load_balancing_loss_coef: float
    null_expert_bias: float
    num_shared_experts: int
    normalize: bool
    router_use_bias: bool
    gate_initializer: Any


@attrs.frozen
class DecoderSettings:
    """Everything a decoder's layers need, settled once from its keys."""

    parallel: bool
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_groups: int
    inner_dim: int
    head_dim: int
    filter_size: int
    max_positions: int
    positions: str | None
    activation: str
    glu: bool
    norm_type: str
    eps: float
    tied: bool
    ffn_bias: bool
    qkv_bias: bool
    out_bias: bool
    lm_head_bias: bool
    dropout: float
    attention_dropout: float
    embedding_dropout: float
    scaled: bool
    qk_by_d: bool
    qk_by_layer: bool
    attention_alpha: float
    rotary_dim: int
    rope_theta: float
    pos_scaling_type: str
    pos_scaling_factor: float
    pos_scaling_extra: Mapping[str, Any]
    window: int | None
    window_layers: str
    sinks: int
    alibi_trainable: bool
    embedding_norm: bool
    embeddings_scale: float
    sandwich: bool
    untied_norm: bool
    attention_cap: float | None
    final_cap: float | None
    logits_scale: float | None
    loss_scaling: str
    loss_weight: float
    initializer_range: float
    initializer: Any
    embedding_initializer: Any
    output_layer_initializer: Any
    mup_width: float | None
    mup_filter: float | None
    moe: MoESettings | None


def _moe(arguments: Mapping[str, Any]) -> MoESettings | None:
    given = arguments.get("moe")
    if not given:
        return None
    merged = {**MOE_DEFAULTS, **given}
    shared = merged["num_shared_experts"] or 0
    if merged["num_experts"] + shared <= 1:
        return None
    return MoESettings(
        num_experts=int(merged["num_experts"]),
        top_k=int(merged["top_k"]),
        load_balancing_loss_coef=float(merged["load_balancing_loss_coef"]),
        null_expert_bias=float(merged["null_expert_bias"]),
        num_shared_experts=int(shared),
        normalize=bool(merged["expert_weighting_normalization"]),
        router_use_bias=bool(merged["router_use_bias"]),
        gate_initializer=merged["gate_initializer"],
    )


def _kv_groups(arguments: Mapping[str, Any]) -> int:
    if arguments["attention_module"] != "multiquery_attention":
        return int(arguments["num_heads"])
    groups = (arguments["extra_attention_params"] or {}).get("num_kv_groups")
    if groups is None:
        warnings.warn(
            "attention_module: multiquery_attention without extra_attention_params."
            "num_kv_groups: using 1 (multi-query attention), as Model Zoo does",
            UserWarning,
            stacklevel=4,
        )
        return 1
    return int(groups)


def _loss_weight(arguments: Mapping[str, Any]) -> float:
    weight = float(arguments["loss_weight"])
    if arguments["loss_scaling"] == "num_tokens" and weight != 1.0:
        warnings.warn(
            f"loss_weight {weight:g} has no effect with loss_scaling: num_tokens; using 1.0, "
            "as Model Zoo does",
            UserWarning,
            stacklevel=4,
        )
        return 1.0
    return weight


def _logits_scale(arguments: Mapping[str, Any], mup_width: float | None) -> float | None:
    if mup_width is None:
        return number(arguments.get("output_logits_scale"))
    alpha = number(arguments["output_logits_alpha"]) or 1.0
    if arguments.get("scale_output_logits_by_d", True):
        return alpha / mup_width
    return alpha / math.sqrt(mup_width)


def resolve_settings(arguments: Mapping[str, Any], *, parallel: bool) -> DecoderSettings:
    """Settle a decoder's validated keys (every schema field present) into its settings.

    :param parallel: the GPT-J path (parallel attention and FFN).
    """
    hidden = int(arguments["hidden_size"])
    heads = int(arguments["num_heads"])
    inner = int(arguments.get("attention_inner_dim") or hidden)
    head_dim = inner // heads
    mup = arguments["mup_base_hidden_size"] is not None
    mup_width = hidden / float(arguments["mup_base_hidden_size"]) if mup else None
    mup_filter = (
        int(arguments["filter_size"]) / float(arguments["mup_base_filter_size"]) if mup else None
    )
    qk_by_d = arguments["scale_qk_dot_by_d"]
    dropout = float(arguments["dropout_rate"])
    attention_dropout = number(arguments["attention_dropout_rate"])
    embedding_dropout = number(arguments["embedding_dropout_rate"])
    rotary = arguments["rotary_dim"]
    activation = str(arguments["nonlinearity"])
    window_pattern = arguments.get("sliding_window_every_other_decoder_layer_pattern")
    every_other = arguments.get("sliding_window_every_other_decoder_layer", False)
    return DecoderSettings(
        parallel=parallel,
        vocab_size=int(arguments["vocab_size"]),
        hidden_size=hidden,
        num_layers=int(arguments["num_hidden_layers"]),
        num_heads=heads,
        num_kv_groups=_kv_groups(arguments),
        inner_dim=inner,
        head_dim=head_dim,
        filter_size=int(arguments["filter_size"]),
        max_positions=int(arguments["max_position_embeddings"]),
        positions=arguments["position_embedding_type"],
        activation=GLU_ACTIVATIONS.get(activation, activation),
        glu=activation in GLU_ACTIVATIONS,
        norm_type=str(arguments["norm_type"]),
        eps=float(arguments["layer_norm_epsilon"]),
        tied=bool(arguments["share_embedding_weights"]),
        ffn_bias=bool(arguments["use_ffn_bias"]),
        qkv_bias=bool(arguments["use_projection_bias_in_attention"]),
        out_bias=bool(arguments["use_ffn_bias_in_attention"]),
        lm_head_bias=bool(arguments["use_bias_in_output"]),
        dropout=dropout,
        attention_dropout=dropout if attention_dropout is None else attention_dropout,
        embedding_dropout=dropout if embedding_dropout is None else embedding_dropout,
        scaled=arguments["attention_type"] == "scaled_dot_product",
        qk_by_d=bool(mup and not parallel) if qk_by_d is None else bool(qk_by_d),
        qk_by_layer=bool(arguments.get("scale_qk_dot_by_layer_idx", False)),
        attention_alpha=number(arguments["attention_logits_alpha"]) or 1.0,
        rotary_dim=int(rotary) if rotary is not None else int(hidden // heads * 0.25),
        rope_theta=float(arguments["rope_theta"]),
        pos_scaling_type=str(arguments["pos_scaling_type"]).lower(),
        pos_scaling_factor=float(arguments["pos_scaling_factor"]),
        pos_scaling_extra=dict(arguments["pos_scaling_extra_args"] or {}),
        window=arguments["attention_sliding_window_length"],
        window_layers=("all" if not every_other else str(window_pattern)),
        sinks=int(arguments["attention_sink_tokens"] or 0) if parallel else 0,
        alibi_trainable=bool(arguments["alibi_trainable_slopes"]),
        embedding_norm=bool(arguments.get("embedding_layer_norm", False)),
        embeddings_scale=number(arguments["embeddings_scale"]) or 1.0,
        sandwich=bool(arguments.get("norm_first_sandwich", False)),
        untied_norm=bool(arguments.get("use_untied_layer_norm", False)),
        attention_cap=number(arguments.get("attention_logit_softcapping")),
        final_cap=number(arguments.get("final_logit_softcapping")),
        logits_scale=_logits_scale(arguments, mup_width),
        loss_scaling=str(arguments["loss_scaling"]),
        loss_weight=_loss_weight(arguments),
        initializer_range=float(arguments["initializer_range"]),
        initializer=arguments["initializer"],
        embedding_initializer=arguments["embedding_initializer"],
        output_layer_initializer=arguments["output_layer_initializer"],
        mup_width=mup_width,
        mup_filter=mup_filter,
        moe=_moe(arguments),
    )
