"""Model Zoo's T5 / transformer network (``T5ForConditionalGeneration``) under its names.

``encoder_embeddings`` / ``decoder_embeddings`` (``word_embeddings``; positions as
``position_embed_helper.relative_attention_bias`` or ``position_embeddings.fpe`` /
``.embed``), ``encoder`` and ``decoder`` (``layers.N``, ``norm``) and ``lm_head``. With
``share_encoder_decoder_embedding`` the decoder's table is the encoder's; with
``share_embedding_weights`` ``lm_head.weight`` is the decoder's table and the decoder output is
multiplied by ``d_model^-1/2`` first (unless muP scales the logits).
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.blocks.decoder_layer import TransformerDecoder, TransformerDecoderLayer
from plugtrain_models.blocks.encoder import TransformerEncoder
from plugtrain_models.blocks.encoder_layer import TransformerEncoderLayer
from plugtrain_models.blocks.masks import causal_mask, key_padding_mask
from plugtrain_models.encoders.t5_positions import (
    FixedPositionEmbedding,
    LearnedPositionEmbedding,
    RelativePositionBias,
)
from plugtrain_models.encoders.t5_settings import T5Settings
from plugtrain_models.layers import make_norm

__all__ = ["T5Embeddings", "T5Network", "shift_right"]


def shift_right(labels: torch.Tensor, start: int) -> torch.Tensor:
    """Decoder inputs from labels: ``start`` then ``labels[:, :-1]``."""
    shifted = labels.new_full(labels.shape, start)
    shifted[:, 1:] = labels[:, :-1]
    return shifted


def _folded(
    mask: torch.Tensor | None, bias: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A boolean mask folded into the stack's position bias once (not again in every layer)."""
    if mask is None or bias is None:
        return mask, bias
    return None, bias.masked_fill(~mask, float("-inf"))


def _padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The key padding mask ``[B, 1, 1, S]``, or ``None`` when no key is padding.

    Without padding the stacks skip the mask: the encoder's bias stays ``[1, nh, S, S]`` (not
    one copy per row) and cross-attention runs SDPA's kernel without a mask.
    """
    if attention_mask is None or bool((attention_mask != 0).all()):
        return None
    return key_padding_mask(attention_mask)


class T5Embeddings(nn.Module):
    """One stack's token table and positions (Model Zoo's ``EmbeddingLayer``)."""

    def __init__(
        self, settings: T5Settings, vocab: int, positions: int | None, *, bidirectional: bool
    ) -> None:
        super().__init__()
        s = settings
        self.word_embeddings = nn.Embedding(vocab, s.d_model)
        self.position_embeddings: nn.Module | None = None
        self.position_embed_helper: RelativePositionBias | None = None
        if s.position_embedding_type == "relative":
            self.position_embed_helper = RelativePositionBias(
                s.num_buckets, s.num_heads, bidirectional=bidirectional
            )
        elif s.position_embedding_type == "fixed":
            assert positions is not None
            self.position_embeddings = FixedPositionEmbedding(positions, s.d_model)
        elif s.position_embedding_type == "learned_absolute":
            assert positions is not None
            self.position_embeddings = LearnedPositionEmbedding(positions, s.d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings plus absolute positions (when the stack has them)."""
        embedded: torch.Tensor = self.word_embeddings(ids)
        if self.position_embeddings is not None:
            embedded = embedded + self.position_embeddings(ids.shape[1]).to(embedded.dtype)
        return embedded

    def position_bias(self, length: int) -> torch.Tensor | None:
        """The relative bias ``[1, nh, S, S]`` of every layer (``None`` without one)."""
        if self.position_embed_helper is None:
            return None
        return self.position_embed_helper(length, length)


class T5Network(nn.Module):
    """The encoder-decoder computing ``lm_logits`` ``[B, T, tgt_vocab]`` (see the module)."""

    def __init__(self, settings: T5Settings) -> None:
        super().__init__()
        s = self.settings = settings
        self.encoder_embeddings = T5Embeddings(s, s.src_vocab, s.src_positions, bidirectional=True)
        self.decoder_embeddings = T5Embeddings(s, s.tgt_vocab, s.tgt_positions, bidirectional=False)
        if s.share_encoder_decoder:
            self.decoder_embeddings.word_embeddings = self.encoder_embeddings.word_embeddings
        self.encoder = TransformerEncoder(
            (self._encoder_layer() for _ in range(s.encoder_layers)), self._norm()
        )
        self.decoder = TransformerDecoder(
            (self._decoder_layer() for _ in range(s.decoder_layers)), self._norm()
        )
        self.dropout = nn.Dropout(s.dropout)
        self.lm_head = nn.Linear(s.d_model, s.tgt_vocab, bias=False)
        if s.share_embedding:
            self.lm_head.weight = self.decoder_embeddings.word_embeddings.weight

    def _norm(self) -> nn.Module:
        return make_norm(self.settings.norm_type, self.settings.d_model, self.settings.eps)

    def _encoder_layer(self) -> TransformerEncoderLayer:
        s = self.settings
        return TransformerEncoderLayer(
            s.d_model, s.num_heads, s.d_ff, dropout=s.dropout, ffn_dropout=s.relu_dropout,
            activation=s.activation, layer_norm_eps=s.eps, norm_type=s.norm_type,
            norm_first=s.norm_first, head_dim=s.d_kv, use_projection_bias=s.qkv_bias,
            use_output_bias=False, use_ffn_bias=s.ffn_bias, scale=s.encoder_scale,
            logits_alpha=s.encoder_alpha,
        )  # fmt: skip

    def _decoder_layer(self) -> TransformerDecoderLayer:
        s = self.settings  # Model Zoo builds the decoder with the encoder's nonlinearity
        return TransformerDecoderLayer(
            s.d_model, s.num_heads, s.d_ff, dropout=s.dropout, ffn_dropout=s.dropout,
            activation=s.activation, layer_norm_eps=s.eps, norm_type=s.norm_type,
            norm_first=s.norm_first, head_dim=s.d_kv, use_projection_bias=s.qkv_bias,
            use_output_bias=False, use_ffn_bias=s.ffn_bias, scale=s.decoder_scale,
            logits_alpha=s.decoder_alpha,
        )  # fmt: skip

    def _embed(self, embeddings: T5Embeddings, ids: torch.Tensor) -> torch.Tensor:
        s = self.settings
        embedded = embeddings(ids)
        if s.embeddings_scale != 1.0:
            embedded = embedded * s.embeddings_scale
        if s.pre_dropout:
            embedded = self.dropout(embedded)
        return self.dropout(embedded)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The encoder's output ``[B, S, d_model]``; padding keys are hidden from every query."""
        hidden = self._embed(self.encoder_embeddings, input_ids)
        mask = _padding_mask(attention_mask)
        bias = self.encoder_embeddings.position_bias(input_ids.shape[1])
        mask, bias = _folded(mask, bias)
        hidden = self.encoder(hidden, mask, None, bias)
        return self.dropout(hidden) if self.settings.dropout_outside_residual else hidden

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        memory: torch.Tensor,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The decoder's output ``[B, T, d_model]``: causal, reading the unpadded encoder keys."""
        hidden = self._embed(self.decoder_embeddings, decoder_input_ids)
        length = decoder_input_ids.shape[1]
        memory_mask = _padding_mask(attention_mask)
        bias = self.decoder_embeddings.position_bias(length)
        causal, bias = _folded(causal_mask(length, hidden.device), bias)
        hidden = self.decoder(hidden, memory, causal, memory_mask, bias)
        return self.dropout(hidden) if self.settings.dropout_outside_residual else hidden

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``lm_logits`` ``[B, T, tgt_vocab]`` (decoder inputs from ``labels`` when not given)."""
        s = self.settings
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("T5 needs decoder_input_ids or labels")
            decoder_input_ids = shift_right(labels, s.decoder_start_token_id)
        memory = self.encode(input_ids, attention_mask)
        hidden = self.decode(decoder_input_ids, memory, attention_mask)
        if s.logits_factor is not None:
            hidden = hidden * s.logits_factor
        logits: torch.Tensor = self.lm_head(hidden)
        if s.output_logits_scale is not None:
            logits = logits * s.output_logits_scale
        return logits
