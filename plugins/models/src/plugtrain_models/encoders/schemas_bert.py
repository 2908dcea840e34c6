"""Argument schemas of the BERT family and ESM-2 (torch-free: ``check`` reads them).

Model Zoo 2.10's ``BertModelConfig`` (:class:`BertEncoderArgs`, also each DPR encoder) and the
configs of ``bert``, ``esm2``, ``bert/classifier``, ``bert/token_classifier`` and
``bert/extractive_summarization``, with their defaults. Numbers may be written as strings, as
Model Zoo's pydantic coerces them. Keys Model Zoo deprecates on the heads are accepted with a
warning; non-default values of what plugtrain does not build are a "not supported" error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import attrs

from plugtrain.schema import Problem, arg
from plugtrain_models.encoders.rules_bert import bert_problems, head_problems

__all__ = [
    "BertArgs",
    "BertClassifierArgs",
    "BertEncoderArgs",
    "BertSummarizationArgs",
    "BertTokenClassifierArgs",
    "Esm2Args",
]

Real = float | str
"""A number, or a string holding one (coerced, as Model Zoo's pydantic does)."""

CSX_ONLY = "it only matters on Cerebras CSX systems; CPU/GPU compute it in float32 exactly"
DEPRECATED = "Model Zoo deprecates it on this model, which does not use it"
Positions = Literal["learned", "fixed", "relative", "rotary", "alibi"] | None


@attrs.frozen
class BertEncoderArgs:
    """A BERT encoder (Model Zoo's ``BertModelConfig``): embeddings, encoder layers, pooler."""

    vocab_size: int = arg(50257, help="rows of word_embeddings", ge=1, le=512000)
    max_position_embeddings: int | None = arg(None, help="learned position table rows", gt=0)
    position_embedding_type: Positions = arg("learned", help="learned or rotary positions")
    hidden_size: int = arg(768, help="width of the encoder (H)", gt=0)
    num_hidden_layers: int = arg(12, help="encoder layers (L)", gt=0)
    num_heads: int = arg(12, help="attention heads (divides H)", gt=0)
    filter_size: int = arg(3072, help="FFN width", gt=0)
    encoder_nonlinearity: str = arg("gelu", help="FFN activation (gelu: exact erf)")
    pooler_nonlinearity: str | None = arg(None, help="pooler activation; null: the encoder's")
    dropout_rate: Real = arg(0.1, help="residual, FFN and embedding dropout")
    attention_dropout_rate: Real | None = arg(None, help="attention dropout; null: dropout_rate")
    embedding_dropout_rate: Real | None = arg(None, help="embedding dropout; null: dropout_rate")
    layer_norm_epsilon: Real = arg(1e-5, help="epsilon of every LayerNorm")
    norm_first: bool = arg(False, help="pre-LN blocks (post-LN when false)")
    embedding_layer_norm: bool = arg(True, help="a LayerNorm on the embeddings (embed_ln_f)")
    use_final_layer_norm: bool = arg(False, help="a LayerNorm after the last layer")
    mask_padding_in_positional_embed: bool = arg(False, help="RoBERTa's padding-aware positions")
    rotary_dim: int | None = arg(None, help="rotated dims per head; null: head size / 4", gt=0)
    rope_theta: Real = arg(10000.0, help="RoPE base")
    num_segments: int | None = arg(None, help="segment table rows (null: 2 with NSP)", ge=0)
    use_projection_bias_in_attention: bool = arg(True, help="q, k, v biases")
    use_ffn_bias_in_attention: bool = arg(True, help="attention output-projection bias")
    use_ffn_bias: bool = arg(True, help="FFN and pooler biases")
    attention_type: Literal["scaled_dot_product", "dot_product"] = arg(
        "scaled_dot_product", help="scaled_dot_product divides q.k by sqrt(head size)"
    )
    initializer_range: Real = arg(0.02, help="std of the default truncated normal")
    mup_base_hidden_size: Real | None = arg(None, help="muP base width")
    mup_base_filter_size: Real | None = arg(None, help="muP base FFN width")
    embeddings_scale: Real = arg(1.0, help="multiplies the embeddings (before embed_ln_f)")
    scale_qk_dot_by_d: bool | None = arg(None, help="divide q.k by d, not sqrt(d); null: muP")
    attention_logits_alpha: Real = arg(1.0, help="multiplies the attention scores")
    output_logits_alpha: Real = arg(1.0, help="muP: multiplies the MLM and NSP logits")
    scale_output_logits_by_d: bool = arg(True, help="muP logits scale 1/w (false: 1/sqrt(w))")
    attention_softmax_fp32: bool = arg(True, help=f"no effect: {CSX_ONLY}")
    attention_kernel: str | None = arg(None, help=f"no effect: {CSX_ONLY}")
    fold_rope_consts: bool = arg(False, help=f"no effect: {CSX_ONLY}")
    # Accepted so that files validate; a non-default value is "not supported" (rules).
    attention_module: str = arg("aiayn_attention", help="multiquery_attention: not supported")
    extra_attention_params: dict[str, Any] = arg({}, help="not supported")
    num_relative_attention_buckets: int = arg(32, help="not supported")
    alibi_trainable_slopes: bool = arg(False, help="not supported")
    pos_scaling_factor: Real = arg(1.0, help="not supported")
    pos_scaling_type: str = arg("linear", help="not supported")
    pos_scaling_extra_args: dict[str, Any] | None = arg(None, help="not supported")
    freeze_ffn_bias_in_glu: bool = arg(False, help="not supported")
    lr_adjustment_groups: dict[str, Any] | None = arg(None, help="not supported")
    dtype: str | None = arg(None, help="not supported")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "attention_softmax_fp32": CSX_ONLY,
        "attention_kernel": CSX_ONLY,
        "fold_rope_consts": "constant folding on CSX; the exact formula is used",
    }

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """The rules between keys, as Model Zoo's BERT model has them."""
        yield from bert_problems(arguments)


@attrs.frozen
class BertArgs(BertEncoderArgs):
    """``bert``: Model Zoo's BERT pretraining model (MLM and NSP heads; RoBERTa, muP)."""

    share_embedding_weights: bool = arg(True, help="the MLM decoder is word_embeddings")
    pad_token_id: int = arg(0, help="padding id (word_embeddings' padding_idx)", ge=0)
    mlm_nonlinearity: str | None = arg(None, help="MLM transform activation; null: encoder's")
    use_ffn_bias_in_mlm: bool = arg(True, help="bias of the MLM transform")
    use_output_bias_in_mlm: bool = arg(True, help="bias of the MLM decoder")
    mlm_loss_weight: Real = arg(1.0, help="multiplies the summed MLM loss per example")
    label_smoothing: Real = arg(0.0, help="MLM label smoothing (training only)")
    disable_nsp: bool = arg(False, help="no NSP head, no pooler, no segment table")
    num_classes: int = arg(2, help="NSP classes", gt=0)
    compute_eval_metrics: bool = arg(True, help="MLM accuracy, perplexity, NSP accuracy")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        **BertEncoderArgs.ignored_arguments,
        "embedding_dropout_rate": "Model Zoo's bert uses dropout_rate for the embeddings",
    }


@attrs.frozen
class Esm2Args(BertArgs):
    """``esm2``: ESM-2 (BERT with pre-LN blocks, rotary positions and token dropout)."""

    norm_first: bool = arg(True, help="pre-LN blocks (post-LN when false)")
    token_dropout: bool = arg(False, help="ESM's scaling of the embeddings around mask tokens")
    mask_token_id: int | None = arg(None, help="the mask token (needed by token_dropout)", ge=0)


@attrs.frozen
class _HeadArgs(BertEncoderArgs):
    """The keys every fine-tuning head adds to the encoder's."""

    vocab_size: int = arg(30522, help="rows of word_embeddings", ge=1, le=512000)
    max_position_embeddings: int | None = arg(1024, help="learned position table rows", gt=0)
    attention_dropout_rate: Real | None = arg(0.1, help="attention dropout; null: dropout_rate")
    num_segments: int | None = arg(2, help="segment table rows", ge=0)
    compute_eval_metrics: bool = arg(False, help="accuracy metrics in evaluation")
    mlm_loss_weight: Any = arg(None, help="deprecated: unused")
    mlm_nonlinearity: Any = arg(None, help="deprecated: unused")
    share_embedding_weights: Any = arg(None, help="deprecated: unused")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        **BertEncoderArgs.ignored_arguments,
        "mlm_loss_weight": DEPRECATED,
        "mlm_nonlinearity": DEPRECATED,
        "share_embedding_weights": DEPRECATED,
    }

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """The encoder's rules, the problem type and the files the section names."""
        yield from head_problems(arguments)


@attrs.frozen
class BertClassifierArgs(_HeadArgs):
    """``bert/classifier``: a sequence classifier on the pooled ``[CLS]`` state."""

    num_labels: int = arg(help="classes (1: regression)", gt=0)
    problem_type: str = arg(help="single_label_classification, regression, multi_label_...")
    task_dropout: Real = arg(help="dropout before the classifier")


@attrs.frozen
class BertTokenClassifierArgs(_HeadArgs):
    """``bert/token_classifier``: a classifier on every position (NER)."""

    num_classes: int = arg(help="classes", gt=0)
    encoder_output_dropout_rate: Real = arg(help="dropout on the encoder output")
    loss_weight: Real | None = arg(1.0, help="multiplies the summed loss per example")
    include_padding_in_loss: bool = arg(False, help="score padding too, the loss divided by S")
    label_vocab_file: str | None = arg(None, help="label -> id JSON (must exist)")
    dropout_rate: Real = arg(0.0, help="residual, FFN and embedding dropout")
    attention_dropout_rate: Real | None = arg(0.0, help="attention dropout; null: dropout_rate")


@attrs.frozen
class BertSummarizationArgs(_HeadArgs):
    """``bert/extractive_summarization``: a sentence classifier at each ``[CLS]`` position."""

    num_labels: int = arg(2, help="classes of each sentence", choices=(2,))
    loss_weight: Real | None = arg(1.0, help="multiplies the summed loss (0 or null: 1)")
    use_cls_bias: bool = arg(True, help="a bias on the classifier")
    vocab_file: str | None = arg(None, help="vocabulary for ROUGE (must exist)")
