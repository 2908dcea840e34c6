"""The trained modules of the BERT family (plugtrain's model protocol), the network under ``model``.

``forward(batch)`` takes a mapping in the data processors' feature names and returns
``{"loss", "num_examples", ...metrics}`` (``num_examples`` is the batch size); a batch without
labels gets the outputs of ``logits(batch)``, the named float tensors the heads compute:

- ``bert``, ``esm2``: ``mlm_logits`` ``[B, P, V]`` at ``masked_lm_positions`` (every position
  when the batch has none) and ``nsp_logits`` ``[B, 2]`` unless NSP is disabled;
- ``bert/classifier``: ``logits`` ``[B, num_labels]``; ``bert/token_classifier``: ``logits``
  ``[B, S, num_classes]``; ``bert/extractive_summarization``: ``logits`` ``[B, C, 2]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain_models.encoders.bert_encoder import BertEncoder
from plugtrain_models.encoders.heads import (
    BertForSequenceClassification,
    BertForSummarization,
    BertForTokenClassification,
    BertPretrainModel,
)
from plugtrain_models.encoders.init_bert import initialise_bert
from plugtrain_models.encoders.losses import (
    classifier_loss,
    mlm_nsp_loss,
    summarization_loss,
    token_loss,
)
from plugtrain_models.encoders.settings_bert import BertSettings
from plugtrain_models.rules import number

__all__ = [
    "LR_GROUPS",
    "BertClassifierModel",
    "BertPretrainingModel",
    "BertSummarizationModel",
    "BertTokenClassifierModel",
]

Batch = Mapping[str, torch.Tensor]

LR_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": ("*embedding*weight",),
    "encoder_attention": ("*transformer_encoder*attn*dense*weight",),
    "encoder_input_ffn": ("*transformer_encoder*ffn.ffn.[!1]*weight",),
    "encoder_output_ffn": ("*transformer_encoder*ffn.ffn.[1]*weight",),
    "pooler": ("*pooler*weight",),
}
"""Model Zoo's learning-rate groups of BERT (full-match globs)."""


def _accuracy(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    hits = (logits.argmax(-1) == labels.long()).to(torch.float32) * weights.float()
    return hits.sum() / weights.float().sum().clamp(min=1)


class _BertTask(nn.Module):
    """What every BERT-family model shares: settings, init, learning-rate groups, aliases."""

    metrics_wanted: bool = True
    """Whether a training forward computes its metrics besides the loss."""

    fsdp_modules = ("model.*.transformer_encoder.layers.*",)
    """FSDP2's units when the backend names none: each encoder layer gets its own fully_shard."""

    tied_names: Mapping[str, str] = {}
    """Names of one tensor under two names (``state_dict`` holds both; loading takes either)."""

    def __init__(
        self, network: nn.Module, settings: BertSettings, family: str, keys: Mapping[str, Any]
    ) -> None:
        super().__init__()
        self.family = family
        self.model_keys = dict(keys)
        """The ``model:`` keys it was built from, defaults filled in."""
        self.bert_settings = settings
        self.model = network
        initialise_bert(self.model, settings)
        self._register_load_state_dict_pre_hook(self._either_name)  # type: ignore[no-untyped-call]

    def _either_name(self, state: dict[str, Any], prefix: str, *args: Any) -> None:
        for first, second in self.tied_names.items():
            for have, lack in (
                (prefix + first, prefix + second),
                (prefix + second, prefix + first),
            ):
                if have in state:
                    state.setdefault(lack, state[have])

    @torch.no_grad()
    def init_weights(self) -> None:
        """Give every parameter the value construction gives it (meta-device contract)."""
        for module in self.model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
        initialise_bert(self.model, self.bert_settings)

    @property
    def lr_adjustment_groups(self) -> dict[str, tuple[str, ...]]:
        """The named parameter groups ``adjust_learning_rate`` keys may name."""
        return dict(LR_GROUPS)

    def learning_rate_factors(self) -> dict[str, float]:
        """The per-group learning-rate factors (empty without muP)."""
        s = self.bert_settings
        factors: dict[str, float] = {}
        if s.mup_width is not None:
            for group in ("encoder_attention", "encoder_input_ffn", "pooler"):
                factors[group] = 1 / s.mup_width
        if s.mup_filter is not None:
            factors["encoder_output_ffn"] = 1 / s.mup_filter
        return factors

    def num_tokens(self, batch: Batch) -> int:
        """The tokens of ``batch``: every input id, padding included."""
        return int(batch["input_ids"].numel())

    def repeated_blocks(self) -> list[nn.Module]:
        """The encoder layers, for regional compile and activation checkpointing."""
        encoder = getattr(self.model, "bert_encoder", None) or self.model.bert
        assert isinstance(encoder, BertEncoder)
        return list(encoder.transformer_encoder.layers)

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The named outputs of ``batch`` (see the module)."""
        raise NotImplementedError

    def loss(self, batch: Batch, outputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """Model Zoo's loss of ``outputs`` against ``batch``'s labels, with metrics."""
        raise NotImplementedError

    def forward(self, batch: Batch) -> Any:
        """The loss mapping when the batch has labels, else the outputs."""
        outputs = self.logits(batch)
        if "labels" not in batch:
            return outputs
        return self.loss(batch, outputs)


class BertPretrainingModel(_BertTask):
    """``bert`` and ``esm2``: MLM (+ NSP) with Model Zoo's summed MLM loss."""

    def __init__(
        self,
        settings: BertSettings,
        family: str,
        keys: Mapping[str, Any],
        *,
        nsp: bool,
        mlm_loss_weight: float,
        num_classes: int = 2,
    ) -> None:
        network = BertPretrainModel(settings, nsp, num_classes)
        super().__init__(network, settings, family, keys)
        self.mlm_loss_weight = mlm_loss_weight
        self.label_smoothing = float(number(keys.get("label_smoothing")) or 0.0)
        self.compute_eval_metrics = bool(keys.get("compute_eval_metrics", True))
        if settings.tied:
            self.tied_names = {
                "model.bert_encoder.embedding_layer.word_embeddings.weight": (
                    "model.bert_mlm_head.classifier.ffn.0.linear_layer.weight"
                )
            }

    @property
    def checkpoint_converter(self) -> str:
        """The Hugging Face converter of this model (``ckpt_path`` may name an HF folder)."""
        if self.family == "esm2":
            return "esm-2"
        return "roberta" if self.bert_settings.padded_positions else "bert"

    @staticmethod
    def _gathers(batch: Batch) -> bool:
        """Model Zoo gathers when the labels are shorter than the sequence."""
        if "masked_lm_positions" not in batch:
            return False
        labels = batch.get("labels")
        return labels is None or labels.shape[1] != batch["input_ids"].shape[1]

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``mlm_logits`` (gathered) and ``nsp_logits`` (with NSP)."""
        positions = batch["masked_lm_positions"] if self._gathers(batch) else None
        mlm, nsp = self.model(
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("token_type_ids"),
            batch.get("position_ids"),
            batch.get("attention_span"),
            positions,
        )
        outputs = {"mlm_logits": mlm}
        if nsp is not None:
            outputs["nsp_logits"] = nsp
        return outputs

    def loss(self, batch: Batch, outputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """``Σ ce·masked_lm_mask / B * mlm_loss_weight`` (+ NSP), and Model Zoo's metrics.

        ``accuracy_masked_lm``, ``mlm_perplexity`` (exp of the batch's mean cross-entropy per
        scored prediction; evaluation only) and ``accuracy_cls`` (NSP), when
        ``compute_eval_metrics``.
        """
        labels = batch["labels"]
        if self._gathers(batch):
            mask = batch.get("masked_lm_mask")
            mask = torch.ones_like(labels) if mask is None else mask
        else:
            mask = torch.ones_like(labels)
        mlm, nsp = outputs["mlm_logits"], outputs.get("nsp_logits")
        nsp_labels = batch.get("next_sentence_label")
        smoothing = self.label_smoothing if self.training else 0.0
        loss = mlm_nsp_loss(
            mlm, labels, mask, nsp, nsp_labels, self.mlm_loss_weight,
            batch.get("mlm_loss_scale"), smoothing,
        )  # fmt: skip
        result: dict[str, Any] = {"loss": loss, "num_examples": int(labels.shape[0])}
        if self.compute_eval_metrics and (self.metrics_wanted or not self.training):
            with torch.no_grad():
                result["accuracy_masked_lm"] = _accuracy(mlm, labels, mask)
                if not self.training:  # a second cross-entropy: evaluation only, as Model Zoo
                    per_token = mlm_nsp_loss(mlm, labels, mask, None, None, 1.0)
                    scored = mask.float().sum().clamp(min=1)
                    result["mlm_perplexity"] = torch.exp(per_token * labels.shape[0] / scored)
                if nsp is not None and nsp_labels is not None:
                    flat = nsp_labels.reshape(-1)
                    result["accuracy_cls"] = _accuracy(nsp, flat, torch.ones_like(flat))
        return result


class BertClassifierModel(_BertTask):
    """``bert/classifier``: CE, MSE or BCE per ``problem_type``."""

    def __init__(self, settings: BertSettings, family: str, keys: Mapping[str, Any]) -> None:
        dropout = float(number(keys["task_dropout"]) or 0.0)
        network = BertForSequenceClassification(settings, keys["num_labels"], dropout)
        super().__init__(network, settings, family, keys)
        self.problem_type = keys["problem_type"]

    @property
    def checkpoint_converter(self) -> str:
        """The Hugging Face converter of this model."""
        return "bert-sequence-classifier"

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` ``[B, num_labels]``."""
        ids, mask, types = (
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("token_type_ids"),
        )
        return {"logits": self.model(ids, mask, types)}

    def loss(self, batch: Batch, outputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The problem type's loss, and accuracy for the classification types."""
        labels, logits = batch["labels"], outputs["logits"]
        loss = classifier_loss(logits, labels, self.problem_type)
        result: dict[str, Any] = {"loss": loss, "num_examples": int(labels.shape[0])}
        wanted = self.metrics_wanted or not self.training
        if wanted and self.problem_type == "single_label_classification":
            with torch.no_grad():
                flat = labels.reshape(-1)
                result["accuracy"] = _accuracy(logits, flat, torch.ones_like(flat))
        return result


class BertTokenClassifierModel(_BertTask):
    """``bert/token_classifier``: ``Σ ce·loss_mask / B * loss_weight``."""

    def __init__(self, settings: BertSettings, family: str, keys: Mapping[str, Any]) -> None:
        dropout = float(number(keys["encoder_output_dropout_rate"]) or 0.0)
        network = BertForTokenClassification(settings, keys["num_classes"], dropout)
        super().__init__(network, settings, family, keys)
        weight = number(keys["loss_weight"])
        self.loss_weight = 1.0 if weight is None else weight
        self.include_padding = bool(keys["include_padding_in_loss"])

    @property
    def checkpoint_converter(self) -> str:
        """The Hugging Face converter of this model."""
        return "bert-token-classifier"

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` ``[B, S, num_classes]``."""
        ids, mask, types = (
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("token_type_ids"),
        )
        return {"logits": self.model(ids, mask, types)}

    def loss(self, batch: Batch, outputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The summed token loss, and the masked accuracy."""
        labels, logits = batch["labels"], outputs["logits"]
        mask = batch.get("loss_mask")
        if mask is None:
            mask = batch.get("attention_mask", torch.ones_like(labels))
        loss = token_loss(logits, labels, mask, self.loss_weight, self.include_padding)
        result: dict[str, Any] = {"loss": loss, "num_examples": int(labels.shape[0])}
        if self.metrics_wanted or not self.training:
            with torch.no_grad():
                result["accuracy"] = _accuracy(logits, labels, mask)
        return result


class BertSummarizationModel(_BertTask):
    """``bert/extractive_summarization``: ``Σ ce·cls_weights / B * loss_weight``."""

    def __init__(self, settings: BertSettings, family: str, keys: Mapping[str, Any]) -> None:
        network = BertForSummarization(settings, keys["num_labels"], keys["use_cls_bias"])
        super().__init__(network, settings, family, keys)
        self.loss_weight = number(keys["loss_weight"]) or 1.0

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """``logits`` ``[B, C, 2]`` at ``cls_indices``."""
        ids, mask, types = (
            batch["input_ids"],
            batch.get("attention_mask"),
            batch.get("token_type_ids"),
        )
        return {"logits": self.model(ids, batch["cls_indices"], mask, types)}

    def loss(self, batch: Batch, outputs: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The summed sentence loss, and the weighted accuracy."""
        labels, logits = batch["labels"], outputs["logits"]
        weights = batch.get("cls_weights")
        weights = torch.ones_like(labels, dtype=torch.float32) if weights is None else weights
        loss = summarization_loss(logits, labels, weights, self.loss_weight)
        result: dict[str, Any] = {"loss": loss, "num_examples": int(labels.shape[0])}
        if self.metrics_wanted or not self.training:
            with torch.no_grad():
                result["accuracy"] = _accuracy(logits, labels, weights)
        return result
