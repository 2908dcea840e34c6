"""Model Zoo's ``BertModel``: embeddings, the encoder stack and the pooler.

``embedding_layer`` -> ``* embeddings_scale`` -> ``embed_ln_f`` (when ``embedding_layer_norm``)
-> dropout -> ``transformer_encoder`` (``layers.N``, ``norm`` when ``use_final_layer_norm``)
with the key-padding mask (or the VSL mask when the batch has ``attention_span``) and rotary
positions on q and k (ESM-2); ``pooler`` on the first token when the model has one.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.blocks.attention import score_scale
from plugtrain_models.blocks.encoder import TransformerEncoder
from plugtrain_models.blocks.encoder_layer import TransformerEncoderLayer
from plugtrain_models.blocks.feedforward import FeedForwardLayer, FeedForwardNetwork
from plugtrain_models.blocks.masks import key_padding_mask, vsl_mask
from plugtrain_models.encoders.embeddings import BertEmbeddings
from plugtrain_models.encoders.settings_bert import BertSettings
from plugtrain_models.layers import rotary_phases

__all__ = ["BertEncoder", "BertPooler"]


class BertPooler(nn.Module):
    """``act(W h[:, 0] + b)``: Model Zoo's ``BertPooler`` (``pooler.ffn.0.linear_layer``)."""

    def __init__(self, s: BertSettings) -> None:
        super().__init__()
        layer = FeedForwardLayer(
            s.hidden_size, s.hidden_size, bias=s.ffn_bias, act=s.pooler_activation, dropout=0.0
        )
        self.pooler = FeedForwardNetwork([layer])

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """The pooled first-token state ``[B, H]``."""
        pooled: torch.Tensor = self.pooler(hidden[:, 0])
        return pooled


def _all_visible(attention_mask: torch.Tensor) -> bool:
    """Whether a CPU batch has no padding: SDPA then runs without a mask, which is faster.

    Only asked on the CPU, where it costs no device synchronisation.
    """
    return attention_mask.device.type == "cpu" and bool(attention_mask.all())


def _layer(s: BertSettings) -> TransformerEncoderLayer:
    return TransformerEncoderLayer(
        s.hidden_size,
        s.num_heads,
        s.filter_size,
        dropout=s.dropout,
        attention_dropout=s.attention_dropout,
        activation=s.activation,
        layer_norm_eps=s.eps,
        norm_first=s.norm_first,
        use_projection_bias=s.qkv_bias,
        use_output_bias=s.out_bias,
        use_ffn_bias=s.ffn_bias,
        scale=score_scale(s.head_dim, s.qk_scale),  # type: ignore[arg-type]
        logits_alpha=s.attention_alpha,
    )


class BertEncoder(nn.Module):
    """Model Zoo's ``BertModel`` (see the module)."""

    def __init__(self, s: BertSettings) -> None:
        super().__init__()
        self.settings = s
        self.embedding_layer = BertEmbeddings(s)
        self.embed_ln_f = nn.LayerNorm(s.hidden_size, eps=s.eps) if s.embedding_norm else None
        self.dropout_embd = nn.Dropout(s.embedding_dropout)
        final = nn.LayerNorm(s.hidden_size, eps=s.eps) if s.final_norm else None
        self.transformer_encoder = TransformerEncoder(
            [_layer(s) for _ in range(s.num_layers)], final
        )
        self.pooler = BertPooler(s) if s.pooler else None

    def _rotary(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None
    ) -> torch.Tensor | None:
        s = self.settings
        if s.positions != "rotary":
            return None
        if position_ids is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        else:
            positions = position_ids.long()
        return rotary_phases(positions, s.rotary_dim, s.rope_theta, "linear", 1.0, {})

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_span: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last hidden states ``[B, S, H]`` and the pooled output (``None``: no pooler)."""
        hidden = self.embedding_layer(input_ids, attention_mask, token_type_ids, position_ids)
        if self.settings.embeddings_scale != 1.0:
            hidden = hidden * self.settings.embeddings_scale
        if self.embed_ln_f is not None:
            hidden = self.embed_ln_f(hidden)
        hidden = self.dropout_embd(hidden)
        mask = None
        if attention_span is not None:
            if position_ids is None:
                raise ValueError("a batch with attention_span (VSL) needs position_ids")
            mask = vsl_mask(attention_span, position_ids)
        elif attention_mask is not None and not _all_visible(attention_mask):
            mask = key_padding_mask(attention_mask)
        rotary = self._rotary(input_ids, position_ids)
        hidden = self.transformer_encoder(hidden, mask, rotary)
        pooled = self.pooler(hidden) if self.pooler is not None else None
        return hidden, pooled
