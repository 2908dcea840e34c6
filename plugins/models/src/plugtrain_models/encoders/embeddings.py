"""BERT's embedding layer (Model Zoo's ``EmbeddingLayer`` for encoders): ``embedding_layer``.

``e = W_word[ids] + W_pos[p] + W_seg[token_type_ids]``: ``word_embeddings`` (padding row
``pad_token_id``), ``position_embeddings.embed`` (learned positions only; RoBERTa's
padding-aware positions use one more row and ``p = where(ids != pad, 1..S, 0)``) and
``segment_embeddings`` (when the model has segments). ESM-2's token dropout rescales the token
embeddings before positions are added.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.encoders.settings_bert import BertSettings

__all__ = ["BertEmbeddings", "LearnedPositions", "token_dropout"]

ESM_MASK_RATIO = 0.15 * 0.8
"""The share of tokens ESM's pretraining replaced by the mask token."""


class LearnedPositions(nn.Module):
    """A learned position table, ``embed`` (Model Zoo's ``LearnedPositionEmbeddingLayer``)."""

    def __init__(self, positions: int, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(positions, width)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """The rows of ``position_ids``."""
        rows: torch.Tensor = self.embed(position_ids)
        return rows


def token_dropout(
    embeddings: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_id: int
) -> torch.Tensor:
    """ESM's token dropout: zero the mask tokens' rows, rescale each row by its mask share.

    Every embedding of row b is multiplied by ``(1 - 0.15 * 0.8) / (1 - m_b / n_b)``, m_b the
    row's mask tokens and n_b its attended tokens (train and eval alike, as Model Zoo).
    """
    masked = input_ids == mask_id
    embeddings = embeddings.masked_fill(masked.unsqueeze(-1), 0.0)
    lengths = attention_mask.to(embeddings.dtype).sum(-1)
    observed = 1 - masked.to(embeddings.dtype).sum(-1) / lengths
    scale = (1 - ESM_MASK_RATIO) / observed
    return (embeddings * scale[:, None, None]).to(embeddings.dtype)


class BertEmbeddings(nn.Module):
    """Word, position and segment tables, as Model Zoo names them."""

    def __init__(self, s: BertSettings) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(s.vocab_size, s.hidden_size, padding_idx=s.pad_token_id)
        self.position_embeddings: LearnedPositions | None = None
        if s.positions == "learned":
            assert s.max_positions is not None
            rows = s.max_positions + 1 if s.padded_positions else s.max_positions
            self.position_embeddings = LearnedPositions(rows, s.hidden_size)
        self.segment_embeddings: nn.Embedding | None = None
        if s.num_segments:
            self.segment_embeddings = nn.Embedding(s.num_segments, s.hidden_size)
        self.padded_positions = s.padded_positions
        self.pad_token_id = s.pad_token_id
        self.token_dropout = s.mask_token_id if s.token_dropout else None

    def _positions(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor | None
    ) -> torch.Tensor:
        if position_ids is not None:
            return position_ids.long()
        steps = torch.arange(input_ids.shape[1], device=input_ids.device)
        if not self.padded_positions:
            return steps.unsqueeze(0)
        real = input_ids != self.pad_token_id
        return torch.where(real, steps + 1, 0)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The embeddings ``[B, S, H]`` of a batch (before the scale, norm and dropout)."""
        embeddings: torch.Tensor = self.word_embeddings(input_ids)
        if self.token_dropout is not None:
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            embeddings = token_dropout(embeddings, input_ids, mask, self.token_dropout)
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(
                self._positions(input_ids, position_ids)
            )
        if self.segment_embeddings is not None and token_type_ids is not None:
            embeddings = embeddings + self.segment_embeddings(token_type_ids.long())
        return embeddings
