"""Model Zoo's initialisation of the BERT family, muP's scaling included.

Every table and every encoder weight gets ``truncated_normal(std=initializer_range, ±2 std)``
(the word table's padding row then 0); under muP the attention and FFN-input weights and the
pooler are scaled by ``m^-1/2`` (m = hidden_size / mup_base_hidden_size), the attention output
by ``m^-1/2 (2L)^-1/2`` and the FFN output by ``m_f^-1/2 (2L)^-1/2`` (m_f the filter ratio).
The NSP and MLM heads keep the plain truncated normal; the fine-tuning classifiers are
``normal(0, 0.02)``. Biases are 0, LayerNorms 1 and 0.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from plugtrain_models.encoders.settings_bert import BertSettings
from plugtrain_models.initializers import default_initializer, make_initializer, scaled

__all__ = ["initialise_bert"]


def _roles(s: BertSettings) -> dict[str, Any]:
    default = default_initializer(s.initializer_range)
    roles: dict[str, Any] = dict.fromkeys(("emb", "attn", "attn_out", "ffn0", "ffn_out"), default)
    roles["head"] = default
    depth = 1 / math.sqrt(2 * s.num_layers)
    if s.mup_width is not None:
        width = 1 / math.sqrt(s.mup_width)
        roles["attn"] = roles["ffn0"] = scaled(default, width)
        roles["attn_out"] = scaled(default, width * depth)
    if s.mup_filter is not None:
        roles["ffn_out"] = scaled(default, depth / math.sqrt(s.mup_filter))
    return roles


def _role(name: str) -> str | None:
    if "embedding_layer." in name:
        return "emb"
    if name.endswith("proj_output_dense_layer"):
        return "attn_out"
    if "self_attn.proj_" in name or "pooler." in name:
        return "attn"
    if "transformer_encoder" in name and name.endswith("ffn.0.linear_layer"):
        return "ffn0"
    if "transformer_encoder" in name and name.endswith("ffn.1.linear_layer"):
        return "ffn_out"
    if name.endswith("linear_layer") and ("bert_cls_head" in name or "bert_mlm_head" in name):
        return "head"
    return None


@torch.no_grad()
def initialise_bert(network: nn.Module, s: BertSettings) -> None:
    """Initialise every weight of ``network`` (a module of :mod:`.heads`) as Model Zoo does."""
    initializers = {role: make_initializer(spec) for role, spec in _roles(s).items()}
    tables = {id(m.weight) for m in network.modules() if isinstance(m, nn.Embedding)}
    for name, module in network.named_modules():
        role = _role(name)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
            continue
        if isinstance(module, nn.Embedding) and role is not None:
            initializers[role](module.weight)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.Linear):
            if id(module.weight) in tables:  # the tied MLM decoder: the word table's values
                pass
            elif role is not None:
                initializers[role](module.weight)
            elif name.endswith("classifier"):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
