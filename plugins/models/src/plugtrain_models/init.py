"""Model Zoo's initialisation of a decoder's weights, muP's scaling included.

Which initializer each weight gets: attention and FFN-input weights ``initializer``, tables
``embedding_initializer``, output projections ``output_layer_initializer``, each defaulting to
``truncated_normal(std=initializer_range)``; the depth scaling ``(2L)^-1/2`` of the default
output initializer; muP's width scalings. Biases are 0, norms 1, an untied head
``normal(0, initializer_range)``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from plugtrain_models.decoder import LanguageModel
from plugtrain_models.ffn import MixtureOfExperts
from plugtrain_models.initializers import default_initializer, make_initializer, scaled
from plugtrain_models.settings import DecoderSettings

__all__ = ["initialise"]


def _wiring(s: DecoderSettings) -> dict[str, Any]:
    """Initializer spec per role: attn, attn_out, ffn0, ffn_out, emb, gate."""
    default = default_initializer(s.initializer_range)
    depth = 1 / math.sqrt(2 * s.num_layers)
    attn = s.initializer or default
    emb = s.embedding_initializer or default
    if s.parallel:
        ffn = s.output_layer_initializer or default
        roles = {"attn": attn, "attn_out": attn, "ffn0": ffn, "ffn_out": ffn, "emb": emb}
    else:
        if s.output_layer_initializer is not None:
            out = s.output_layer_initializer
        elif s.initializer is None:
            out = scaled(default, depth)
        else:
            out = attn
        roles = {"attn": attn, "attn_out": out, "ffn0": attn, "ffn_out": out, "emb": emb}
    if s.mup_width is not None and s.mup_filter is not None:
        width = 1 / math.sqrt(s.mup_width)
        roles["attn"] = scaled(roles["attn"], width)
        roles["ffn0"] = scaled(roles["ffn0"], width)
        roles["attn_out"] = scaled(s.output_layer_initializer or default, width * depth)
        roles["ffn_out"] = scaled(default, depth / math.sqrt(s.mup_filter))
    gate = s.moe.gate_initializer if s.moe is not None else None
    roles["gate"] = s.initializer or gate or default
    return roles


def _role(name: str) -> str | None:
    if name.endswith(("word_embeddings", "position_embeddings.embed")):
        return "emb"
    if name.endswith("proj_output_dense_layer"):
        return "attn_out"
    if "self_attn.proj_" in name:
        return "attn"
    if name.endswith(("0.linear_layer", "0.linear_layer_for_glu")):
        return "ffn0"
    if name.endswith("1.linear_layer"):
        return "ffn_out"
    if name.endswith("ffn.gate"):
        return "gate"
    return None


@torch.no_grad()
def initialise(model: LanguageModel) -> None:
    """Initialise every weight of ``model`` as Model Zoo does."""
    s = model.settings
    initializers = {role: make_initializer(spec) for role, spec in _wiring(s).items()}
    for name, module in model.named_modules():
        role = _role(name)
        if isinstance(module, nn.Linear | nn.Embedding) and role is not None:
            initializers[role](module.weight)
        elif isinstance(module, nn.LayerNorm) or type(module).__name__ == "RMSNorm":
            nn.init.ones_(module.weight)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, MixtureOfExperts) and module.gate.bias is not None:
            nn.init.zeros_(module.gate.bias)
    if not s.tied:
        nn.init.normal_(model.lm_head.weight, 0.0, s.initializer_range)
    if s.positions == "alibi" and s.alibi_trainable:
        nn.init.xavier_uniform_(model.embedding_layer.position_embed_helper.slopes)
