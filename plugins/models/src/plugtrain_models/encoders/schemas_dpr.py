"""Argument schema of ``dpr`` (torch-free: ``check`` reads it).

Model Zoo 2.10's ``DPRModelConfig``: two BERT encoder sections ``q_encoder`` and
``ctx_encoder`` (or one ``encoder``, shared when ``use_biencoder: false``), each Model Zoo's
``DPREncoderConfig`` (:class:`DprEncoderArgs`), and the pooling, temperature and
mutual-information keys of the in-batch contrastive loss.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_models.encoders.schemas_bert import BertEncoderArgs

__all__ = ["ENCODER_SECTIONS", "DprArgs", "DprEncoderArgs"]

Real = float | str
"""A number, or a string holding one (coerced, as Model Zoo's pydantic does)."""

DEPRECATED = "Model Zoo deprecates it on DPR's encoders, which do not use it"
ENCODER_SECTIONS = ("q_encoder", "ctx_encoder", "encoder")
"""The sections that hold an encoder."""


@attrs.frozen
class DprEncoderArgs(BertEncoderArgs):
    """One DPR encoder (Model Zoo's ``DPREncoderConfig``): a BERT encoder without ``name``."""

    add_pooling_layer: bool = arg(False, help="set by pooler_type (ffn_pooler adds the pooler)")
    disable_nsp: bool = arg(False, help="no segment table when num_segments is null")
    pad_token_id: int = arg(0, help="padding id (word_embeddings' padding_idx)", ge=0)
    mlm_loss_weight: Any = arg(None, help="deprecated: unused")
    mlm_nonlinearity: Any = arg(None, help="deprecated: unused")
    share_embedding_weights: Any = arg(None, help="deprecated: unused")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        **BertEncoderArgs.ignored_arguments,
        "mlm_loss_weight": DEPRECATED,
        "mlm_nonlinearity": DEPRECATED,
        "share_embedding_weights": DEPRECATED,
    }


@attrs.frozen
class DprArgs:
    """``dpr``: Model Zoo's dense passage retriever (question and context BERT encoders)."""

    q_encoder: dict[str, Any] | None = arg(
        None, help="the question encoder's BERT keys", section=DprEncoderArgs
    )
    ctx_encoder: dict[str, Any] | None = arg(
        None, help="the context encoder's BERT keys", section=DprEncoderArgs
    )
    encoder: dict[str, Any] | None = arg(
        None, help="one encoder's keys (both, or shared with use_biencoder: false)",
        section=DprEncoderArgs,
    )  # fmt: skip
    softmax_temperature: Real = arg(1.0, help="divides the scores before the softmax")
    mutual_information: bool = arg(False, help="add the context-to-question loss")
    use_biencoder: bool = arg(True, help="two encoders (false: one for both)")
    pooler_type: Literal["mean", "cls", "ffn_pooler"] = arg(
        "cls", help="sequence embedding: [CLS] state, masked mean, or the pooler on [CLS]"
    )
    compute_eval_metrics: bool = arg(False, help="retrieval accuracy in evaluation")
    selected_encoder: Literal["q_encoder", "ctx_encoder", "encoder"] | None = arg(
        None, help="embedding generation only (no effect on training)"
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Model Zoo's rule: ``q_encoder`` and ``ctx_encoder``, or ``encoder`` alone."""
        q, ctx, one = (arguments[k] is not None for k in ENCODER_SECTIONS)
        if not ((q and ctx and not one) or (one and not q and not ctx)):
            yield about(
                ENCODER_SECTIONS,
                "give both q_encoder and ctx_encoder, or only encoder",
            )
        elif not arguments["use_biencoder"] and not one:
            yield about("use_biencoder", "use_biencoder: false needs encoder (not q_encoder)")
        temperature = arguments["softmax_temperature"]
        try:
            positive = float(temperature) > 0
        except (TypeError, ValueError):
            yield about("softmax_temperature", f"must be a number, got {temperature!r}")
        else:
            if not positive:
                yield about("softmax_temperature", f"must be > 0, got {temperature!r}")
