"""Model Zoo's initialisation of T5 and the transformer.

T5 (``use_transformer_initialization: false``): normal draws with std ``f`` (tables),
``f (d_model d_kv)^-1/2`` (queries), ``f d_model^-1/2`` (keys, values, attention outputs, FFN
inputs), ``f d_ff^-1/2`` (FFN outputs), ``f`` the ``initializer_factor``; relative biases Xavier
uniform. Under muP the tables' std is multiplied by ``d_model^-1/2`` and, as Model Zoo's
``scale_initializers_by_dimension(depth_scale=2L)`` does, the attention and FFN output stds by
``2L``. The transformer: tables truncated normal (std 1 within ±2), attention variance scaling
(fan average, uniform; ``1/(9 d_kv)`` for queries, ``1/9`` otherwise), FFN Xavier uniform.
Biases are zero; norms one (weight) and zero (bias).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from plugtrain_models.blocks.attention import MultiheadAttention
from plugtrain_models.blocks.feedforward import FeedForward
from plugtrain_models.encoders.t5 import T5Embeddings, T5Network
from plugtrain_models.layers import RMSNorm

__all__ = ["initialise_t5"]


def _variance_scaling(weight: torch.Tensor, scale: float) -> None:
    fan_out, fan_in = weight.shape
    limit = math.sqrt(3.0 * scale / ((fan_in + fan_out) / 2))
    nn.init.uniform_(weight, -limit, limit)


def _zero_bias(linear: nn.Linear) -> None:
    if linear.bias is not None:
        nn.init.zeros_(linear.bias)


@torch.no_grad()
def _attention(network: T5Network, attention: MultiheadAttention, depth: int) -> None:
    s = network.settings
    f = s.initializer_factor
    q, k, v, o = (
        attention.proj_q_dense_layer, attention.proj_k_dense_layer,
        attention.proj_v_dense_layer, attention.proj_output_dense_layer,
    )  # fmt: skip
    if s.transformer_init:
        _variance_scaling(q.weight, 1.0 / (9.0 * s.d_kv))
        for linear in (k, v, o):
            _variance_scaling(linear.weight, 1.0 / 9.0)
    else:
        nn.init.normal_(q.weight, std=f * (s.d_model * s.d_kv) ** -0.5)
        for linear in (k, v):
            nn.init.normal_(linear.weight, std=f * s.d_model**-0.5)
        output = f * s.d_model**-0.5 * (depth if s.mup_width is not None else 1)
        nn.init.normal_(o.weight, std=output)
    for linear in (q, k, v, o):
        _zero_bias(linear)


@torch.no_grad()
def _ffn(network: T5Network, ffn: FeedForward, depth: int) -> None:
    s = network.settings
    f = s.initializer_factor
    inner, outer = ffn.ffn[0], ffn.ffn[1]
    linears = [inner.linear_layer, getattr(inner, "linear_layer_for_glu", None)]
    for linear in (*[x for x in linears if x is not None], outer.linear_layer):
        if s.transformer_init:
            nn.init.xavier_uniform_(linear.weight)
        elif linear is outer.linear_layer:
            scaled = depth if s.mup_base_d_ff is not None else 1
            nn.init.normal_(linear.weight, std=f * s.d_ff**-0.5 * scaled)
        else:
            nn.init.normal_(linear.weight, std=f * s.d_model**-0.5)
        _zero_bias(linear)


@torch.no_grad()
def _table(network: T5Network, weight: torch.Tensor) -> None:
    s = network.settings
    if s.transformer_init:
        nn.init.trunc_normal_(weight, std=1.0, a=-2.0, b=2.0)
        return
    std = s.initializer_factor * (s.d_model**-0.5 if s.mup_width is not None else 1.0)
    nn.init.normal_(weight, std=std)


@torch.no_grad()
def initialise_t5(network: T5Network) -> None:
    """Draw every parameter of ``network`` as Model Zoo does (see the module)."""
    s = network.settings
    tables: list[T5Embeddings] = [network.encoder_embeddings]
    if not s.share_encoder_decoder:
        tables.append(network.decoder_embeddings)
    for embeddings in tables:
        _table(network, embeddings.word_embeddings.weight)
    for embeddings in (network.encoder_embeddings, network.decoder_embeddings):
        helper = embeddings.position_embed_helper
        if helper is not None:
            nn.init.xavier_uniform_(helper.relative_attention_bias.weight)
        position = embeddings.position_embeddings
        if position is not None and hasattr(position, "embed"):
            _table(network, position.embed.weight)
    for stack, layers in ((network.encoder, s.encoder_layers), (network.decoder, s.decoder_layers)):
        for layer in stack.layers:
            _attention(network, layer.self_attn, 2 * layers)
            cross = getattr(layer, "multihead_attn", None)
            if cross is not None:
                _attention(network, cross, 2 * layers)
            _ffn(network, layer.ffn, 2 * layers)
    for module in network.modules():
        if isinstance(module, nn.LayerNorm | RMSNorm):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    if not s.share_embedding:
        std = s.initializer_factor / (math.sqrt(s.d_model) if s.mup_width is not None else 1.0)
        nn.init.normal_(network.lm_head.weight, std=std)
