"""``dpr``: Model Zoo's dense passage retriever, the network under ``model`` and its loss.

``model.question_encoder`` and ``model.ctx_encoder`` are BERT encoders (no pooler unless
``pooler_type: ffn_pooler``; one shared ``question_encoder`` with ``use_biencoder: false``).
A batch holds ``questions_{input_ids,attention_mask,token_type_ids}`` ``[B, S]`` and
``ctx_{...}`` ``[B, C, S]`` (flattened to ``[B*C, S]``), ``labels`` ``[B]`` (= ``arange(B) * C``)
and optionally ``context_labels``. ``logits(batch)`` returns ``q2c_scores`` ``[B, B*C]``,
``q_embeddings`` ``[B, H]`` and ``ctx_embeddings`` ``[B*C, H]`` (and ``c2q_scores`` ``[B, B]``
with ``mutual_information``); ``forward(batch)`` returns ``{"loss", "num_examples", ...}`` with
the contexts of every data-parallel process as negatives (:mod:`.dpr_loss`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_models.encoders.bert import LR_GROUPS
from plugtrain_models.encoders.bert_encoder import BertEncoder
from plugtrain_models.encoders.dpr_loss import contrastive_loss
from plugtrain_models.encoders.init_bert import initialise_bert
from plugtrain_models.encoders.schemas_dpr import DprArgs, DprEncoderArgs
from plugtrain_models.encoders.settings_bert import BertSettings, resolve_bert

__all__ = ["DprModel", "DprNetwork", "dpr", "mean_pooling"]

Batch = Mapping[str, torch.Tensor]


def mean_pooling(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of the attended rows of ``hidden`` ``[N, S, H]`` (Model Zoo's ``mean_pooling``)."""
    weights = attention_mask.unsqueeze(-1).to(torch.float32)
    total = (hidden * weights).sum(1)
    return (total / weights.sum(1).clamp(min=1e-9)).to(hidden.dtype)


class DprNetwork(nn.Module):
    """The question and context encoders and the pooling (see the module)."""

    def __init__(
        self, question: BertSettings, context: BertSettings | None, pooler_type: str
    ) -> None:
        super().__init__()
        self.question_encoder = BertEncoder(question)
        self.ctx_encoder = BertEncoder(context) if context is not None else None
        self.pooler_type = pooler_type

    def _embed(
        self, encoder: BertEncoder, ids: torch.Tensor, mask: Any, types: Any
    ) -> torch.Tensor:
        hidden, pooled = encoder(ids.long(), mask, None if types is None else types.long())
        if self.pooler_type == "mean":
            if mask is None:
                mask = torch.ones_like(ids)
            return mean_pooling(hidden, mask)
        if self.pooler_type == "ffn_pooler" and pooled is not None:
            return pooled
        return hidden[:, 0]

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q_embeddings [B, H], ctx_embeddings [B*C, H])``."""
        q = self._embed(
            self.question_encoder,
            batch["questions_input_ids"],
            batch.get("questions_attention_mask"),
            batch.get("questions_token_type_ids"),
        )
        ids = batch["ctx_input_ids"]
        length = ids.shape[-1]

        def flat(name: str) -> torch.Tensor | None:
            value = batch.get(name)
            return None if value is None else value.reshape(-1, length)

        encoder = self.ctx_encoder if self.ctx_encoder is not None else self.question_encoder
        ctx = self._embed(
            encoder, ids.reshape(-1, length), flat("ctx_attention_mask"), flat("ctx_token_type_ids")
        )
        return q, ctx


class DprModel(nn.Module):
    """Model Zoo's DPR with its in-batch contrastive loss (see the module)."""

    metrics_wanted: bool = True
    """Whether a training forward computes ``accuracy`` besides the loss."""

    def __init__(
        self,
        question: BertSettings,
        context: BertSettings | None,
        keys: Mapping[str, Any],
    ) -> None:
        super().__init__()
        self.family = "dpr"
        self.model_keys = dict(keys)
        """The ``model:`` keys it was built from, defaults filled in."""
        self.question_settings, self.context_settings = question, context
        self.temperature = float(keys["softmax_temperature"])
        self.mutual_information = bool(keys["mutual_information"])
        self.compute_eval_metrics = bool(keys["compute_eval_metrics"])
        self.model = DprNetwork(question, context, str(keys["pooler_type"]))
        self._initialise()
        self._register_load_state_dict_pre_hook(_context_from_question)

    def _initialise(self) -> None:
        initialise_bert(self.model.question_encoder, self.question_settings)
        if self.model.ctx_encoder is not None and self.context_settings is not None:
            initialise_bert(self.model.ctx_encoder, self.context_settings)

    @property
    def checkpoint_converter(self) -> str:
        """The ``dpr`` converter (a ``ckpt_path`` may name a Hugging Face DPR folder)."""
        return "dpr"

    @torch.no_grad()
    def init_weights(self) -> None:
        """Give every parameter the value construction gives it, with the same draws."""
        for module in self.model.modules():
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
        self._initialise()

    @property
    def lr_adjustment_groups(self) -> dict[str, tuple[str, ...]]:
        """The named parameter groups ``adjust_learning_rate`` keys may name (BERT's)."""
        return dict(LR_GROUPS)

    def num_tokens(self, batch: Batch) -> int:
        """Every question and context token of ``batch``, padding included."""
        return int(batch["questions_input_ids"].numel() + batch["ctx_input_ids"].numel())

    def repeated_blocks(self) -> list[nn.Module]:
        """Both encoders' layers, for regional compile and checkpointing."""
        encoders = [self.model.question_encoder, self.model.ctx_encoder]
        return [layer for e in encoders if e is not None for layer in e.transformer_encoder.layers]

    def logits(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The local scores and embeddings (see the module)."""
        q, ctx = self.model(batch)
        out = {"q2c_scores": q @ ctx.T, "q_embeddings": q, "ctx_embeddings": ctx}
        if self.mutual_information:
            first = ctx.view(q.shape[0], -1, ctx.shape[-1])[:, 0]
            out["c2q_scores"] = first @ q.T
        return out

    def forward(self, batch: Batch) -> Any:
        """The loss mapping for a batch with ``labels``, else :meth:`logits`."""
        labels = batch.get("labels")
        if labels is None:
            return self.logits(batch)
        q, ctx = self.model(batch)
        loss, _ = contrastive_loss(
            q, ctx, labels.reshape(-1), temperature=self.temperature,
            mutual_information=self.mutual_information,
            context_labels=batch.get("context_labels"),
        )  # fmt: skip
        result: dict[str, Any] = {"loss": loss, "num_examples": int(q.shape[0])}
        if self.compute_eval_metrics and not self.training:
            with torch.no_grad():  # retrieval among the local contexts, which labels index
                hits = (q @ ctx.T).argmax(-1) == labels.reshape(-1).long()
                result["accuracy"] = hits.float().mean()
        return result


def _context_from_question(state: dict[str, Any], prefix: str, *args: Any) -> None:
    """A uni-encoder checkpoint loads into both encoders (Model Zoo's biencoder loading)."""
    question, context = prefix + "model.question_encoder.", prefix + "model.ctx_encoder."
    if any(k.startswith(context) for k in state):
        return
    for name in [k for k in state if k.startswith(question)]:
        state[context + name[len(question) :]] = state[name]


def _encoder_settings(section: Mapping[str, Any], owner: str, pooler: bool) -> BertSettings:
    keys = validated_arguments(DprEncoderArgs, section, owner=owner)
    keys["add_pooling_layer"] = pooler
    keys["embedding_dropout_rate"] = keys["dropout_rate"]  # Model Zoo's DPREncoderConfig
    return resolve_bert(keys, pretraining=False, pooler=pooler)


def dpr(**arguments: Any) -> DprModel:
    """Model Zoo's ``dpr`` (keys: :class:`~plugtrain_models.encoders.schemas_dpr.DprArgs`)."""
    keys = validated_arguments(DprArgs, arguments, owner="dpr")
    pooler = keys["pooler_type"] == "ffn_pooler"
    if keys["encoder"] is not None:
        question = _encoder_settings(keys["encoder"], "dpr.encoder", pooler)
        context = question if keys["use_biencoder"] else None
    else:
        question = _encoder_settings(keys["q_encoder"], "dpr.q_encoder", pooler)
        context = _encoder_settings(keys["ctx_encoder"], "dpr.ctx_encoder", pooler)
    return DprModel(question, context, keys)


dpr.__signature__ = constructor_signature(DprArgs)  # type: ignore[attr-defined]
