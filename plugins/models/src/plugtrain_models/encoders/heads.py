"""The networks under ``model``: BERT pretraining (MLM + NSP) and the three fine-tuning heads.

Names as Model Zoo's: ``bert_encoder``, ``bert_cls_head.classifier.ffn.0.linear_layer`` (NSP),
``bert_mlm_head.mlm_transform.{ffn.ffn.0.linear_layer, ln}`` and
``bert_mlm_head.classifier.ffn.0.linear_layer`` (its weight is ``word_embeddings`` when tied);
the heads hold ``bert`` and ``classifier``.
"""

from __future__ import annotations

import torch
from torch import nn

from plugtrain_models.blocks.feedforward import FeedForwardLayer, FeedForwardNetwork
from plugtrain_models.encoders.bert_encoder import BertEncoder
from plugtrain_models.encoders.settings_bert import BertSettings

__all__ = [
    "BertClassifierHead",
    "BertForSequenceClassification",
    "BertForSummarization",
    "BertForTokenClassification",
    "BertMLMHead",
    "BertPretrainModel",
    "gather_positions",
]


def _linear(
    width_in: int, width_out: int, bias: bool, act: str | None = None
) -> FeedForwardNetwork:
    return FeedForwardNetwork(
        [FeedForwardLayer(width_in, width_out, bias=bias, act=act, dropout=0)]
    )


def gather_positions(hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``hidden[b, positions[b, i]]``: ``[B, P, H]`` from ``[B, S, H]`` and ``[B, P]``."""
    index = positions.long().unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
    return torch.gather(hidden, 1, index)


class _MLMTransform(nn.Module):
    """``ln(act(dense(h)))``: ``ffn.ffn.0.linear_layer`` and ``ln``."""

    def __init__(self, s: BertSettings) -> None:
        super().__init__()
        self.ffn = _linear(s.hidden_size, s.hidden_size, s.mlm_ffn_bias, s.mlm_activation)
        self.ln = nn.LayerNorm(s.hidden_size, eps=s.eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """The transformed states."""
        out: torch.Tensor = self.ln(self.ffn(hidden))
        return out


class BertMLMHead(nn.Module):
    """Model Zoo's ``BertMLMHead``: the transform, then the vocabulary projection."""

    def __init__(self, s: BertSettings) -> None:
        super().__init__()
        self.mlm_transform = _MLMTransform(s)
        self.classifier = _linear(s.hidden_size, s.vocab_size, s.mlm_output_bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of ``hidden``."""
        out: torch.Tensor = self.classifier(self.mlm_transform(hidden))
        return out


class BertClassifierHead(nn.Module):
    """The NSP head: ``classifier.ffn.0.linear_layer`` ``[num_classes, H]``."""

    def __init__(self, s: BertSettings, num_classes: int) -> None:
        super().__init__()
        self.classifier = _linear(s.hidden_size, num_classes, s.ffn_bias)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """NSP logits ``[B, num_classes]``."""
        out: torch.Tensor = self.classifier(pooled)
        return out


class BertPretrainModel(nn.Module):
    """``bert_encoder``, ``bert_cls_head`` (NSP, unless disabled) and ``bert_mlm_head``."""

    def __init__(self, s: BertSettings, nsp: bool, num_classes: int = 2) -> None:
        super().__init__()
        self.settings = s
        self.bert_encoder = BertEncoder(s)
        if nsp:
            self.bert_cls_head = BertClassifierHead(s, num_classes)
        self.nsp = nsp
        self.bert_mlm_head = BertMLMHead(s)
        if s.tied:
            word = self.bert_encoder.embedding_layer.word_embeddings
            decoder = self.bert_mlm_head.classifier.ffn[0]
            assert isinstance(decoder, FeedForwardLayer)
            decoder.linear_layer.weight = word.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        attention_span: torch.Tensor | None = None,
        masked_lm_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MLM logits (at ``masked_lm_positions`` when given) and NSP logits (or ``None``)."""
        hidden, pooled = self.bert_encoder(
            input_ids, attention_mask, token_type_ids, position_ids, attention_span
        )
        if masked_lm_positions is not None:
            hidden = gather_positions(hidden, masked_lm_positions)
        mlm_logits = self.bert_mlm_head(hidden)
        nsp_logits = None
        if self.nsp:
            assert pooled is not None
            nsp_logits = self.bert_cls_head(pooled)
        scale = self.settings.output_logits_scale
        if scale:
            mlm_logits = mlm_logits * scale
            nsp_logits = nsp_logits * scale if nsp_logits is not None else None
        return mlm_logits, nsp_logits


class BertForSequenceClassification(nn.Module):
    """``bert`` (with its pooler), dropout, ``classifier`` ``[num_labels, H]``."""

    def __init__(self, s: BertSettings, num_labels: int, task_dropout: float) -> None:
        super().__init__()
        self.bert = BertEncoder(s)
        self.dropout = nn.Dropout(task_dropout)
        self.classifier = nn.Linear(s.hidden_size, num_labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, num_labels]``."""
        _, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        assert pooled is not None
        out: torch.Tensor = self.classifier(self.dropout(pooled))
        return out


class BertForTokenClassification(nn.Module):
    """``bert`` (no pooler), dropout, ``classifier`` ``[num_classes, H]`` on every position."""

    def __init__(self, s: BertSettings, num_classes: int, output_dropout: float) -> None:
        super().__init__()
        self.bert = BertEncoder(s)
        self.dropout = nn.Dropout(output_dropout)
        self.classifier = nn.Linear(s.hidden_size, num_classes)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, S, num_classes]``."""
        hidden, _ = self.bert(input_ids, attention_mask, token_type_ids)
        out: torch.Tensor = self.classifier(self.dropout(hidden))
        return out


class BertForSummarization(nn.Module):
    """``bert`` (no pooler), ``classifier`` ``[2, H]`` at each sentence's ``[CLS]`` position."""

    def __init__(self, s: BertSettings, num_labels: int, bias: bool) -> None:
        super().__init__()
        self.bert = BertEncoder(s)
        self.classifier = nn.Linear(s.hidden_size, num_labels, bias=bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        cls_indices: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, C, num_labels]``."""
        hidden, _ = self.bert(input_ids, attention_mask, token_type_ids)
        out: torch.Tensor = self.classifier(gather_positions(hidden, cls_indices))
        return out
