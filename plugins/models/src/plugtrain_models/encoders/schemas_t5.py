"""Argument schema of ``t5`` and ``transformer`` (torch-free: ``check`` reads it).

Model Zoo 2.10's ``T5ForConditionalGenerationModelConfig`` with its loss keys: the same keys and
defaults for both names (``transformer`` is T5's model with its own name). Numbers may be
written as strings, as Model Zoo's pydantic coerces them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import attrs

from plugtrain.schema import Problem, about, arg

__all__ = ["NONLINEARITIES", "T5Args", "t5_problems"]

Real = float | str
"""A number, or a string holding one (coerced, as Model Zoo's pydantic does)."""

CSX_ONLY = "it only matters on Cerebras CSX systems; CPU/GPU compute it in float32 exactly"

NONLINEARITIES = ("relu", "gelu", "reglu", "geglu", "swiglu")
"""The FFN activations Model Zoo's T5 accepts (the GLU ones gate ``linear_layer_for_glu``)."""

_NUMBERS = (
    "dropout_rate", "relu_dropout_rate", "layer_norm_epsilon", "initializer_factor",
    "label_smoothing", "embeddings_alpha", "encoder_attention_logits_alpha",
    "decoder_attention_logits_alpha", "output_logits_alpha", "lm_loss_weight",
    "mup_base_d_model", "mup_base_d_ff",
)  # fmt: skip

_UNSUPPORTED: dict[str, Any] = {
    "tie_encoder_decoder": False,
    "use_cache": False,
    "attention_module": "aiayn_attention",
    "extra_attention_params": {},
    "lr_adjustment_groups": None,
    "mup_base_d_kv": None,
    "dtype": None,
}


@attrs.frozen
class T5Args:
    """Model Zoo's T5 encoder-decoder (also the ``transformer``): relative or fixed positions."""

    src_vocab_size: int = arg(32128, help="source vocabulary (the table adds extra_ids)", ge=1,
                              le=512000)  # fmt: skip
    tgt_vocab_size: int | None = arg(None, help="target vocabulary; null: src_vocab_size", ge=1,
                                     le=512000)  # fmt: skip
    extra_ids: int = arg(0, help="sentinel tokens appended to the vocabularies", ge=0)
    d_model: int = arg(512, help="width of the residual stream", gt=0)
    d_kv: int = arg(64, help="size of each attention head (nh*d_kv need not be d_model)", gt=0)
    d_ff: int = arg(2048, help="FFN width", gt=0)
    encoder_num_hidden_layers: int = arg(6, help="encoder layers", ge=0)
    decoder_num_hidden_layers: int | None = arg(None, help="decoder layers; null: encoder's",
                                                ge=0)  # fmt: skip
    num_heads: int = arg(8, help="attention heads", gt=0)
    relative_attention_num_buckets: int = arg(32, help="relative position buckets", gt=1)
    norm_type: str = arg("rmsnorm", help="layernorm (weight and bias) or rmsnorm (T5's)")
    dropout_rate: Real = arg(0.1, help="dropout of every residual branch and embedding")
    relu_dropout_rate: Real | None = arg(None, help="inside the FFN; null: dropout_rate")
    layer_norm_epsilon: Real = arg(1e-5, help="epsilon of every norm")
    initializer_factor: Real = arg(1.0, help="multiplies every initializer's std")
    encoder_nonlinearity: str = arg("relu", help="FFN activation of both stacks")
    decoder_nonlinearity: str | None = arg(
        None, help="validated, then unused (Model Zoo builds the decoder with the encoder's)"
    )
    use_projection_bias_in_attention: bool = arg(False, help="q, k and v projection biases")
    attention_softmax_fp32: bool = arg(True, help=f"no effect: {CSX_ONLY}")
    attention_kernel: str | None = arg(None, help=f"no effect: {CSX_ONLY}")
    use_cache: bool = arg(False, help="generation cache (Model Zoo: not supported)")
    decoder_start_token_id: int | None = arg(None, help="first decoder input when shifting labels")
    pad_token_id: int = arg(0, help="the padding id")
    position_embedding_type: str | None = arg(
        "relative", help="relative (T5 buckets), fixed (sinusoid) or learned_absolute"
    )
    src_max_position_embeddings: int | None = arg(None, help="encoder positions", gt=0)
    tgt_max_position_embeddings: int | None = arg(None, help="decoder positions", gt=0)
    use_dropout_outside_residual_path: bool = arg(True, help="dropout after each stack's norm")
    share_encoder_decoder_embedding: bool = arg(True, help="one table for encoder and decoder")
    share_embedding_weights: bool = arg(True, help="lm_head is the decoder table")
    tie_encoder_decoder: bool = arg(False, help="not supported (Model Zoo neither)")
    use_pre_encoder_decoder_dropout: bool = arg(False, help="dropout after the embeddings")
    use_pre_encoder_decoder_layer_norm: bool = arg(True, help="pre-LN blocks; false: post-LN")
    use_ffn_bias: bool = arg(False, help="FFN biases (forced off with gelu)")
    label_smoothing: Real = arg(0.0, help="label smoothing of the training loss")
    use_transformer_initialization: bool = arg(
        False, help="scaled Xavier initialisation and 1/sqrt(d_kv) attention"
    )
    lr_adjustment_groups: dict[str, Any] | None = arg(None, help="not supported")
    mup_base_d_model: Real | None = arg(None, help="muP base d_model (with mup_base_d_ff)")
    mup_base_d_ff: Real | None = arg(None, help="muP base d_ff")
    mup_base_d_kv: int | None = arg(None, help="muP base d_kv (not supported)")
    embeddings_alpha: Real | None = arg(1.0, help="multiplies the embeddings")
    encoder_attention_logits_alpha: Real = arg(1.0, help="multiplies the encoder's scores")
    decoder_attention_logits_alpha: Real = arg(1.0, help="multiplies the decoder's scores")
    scale_encoder_qk_dot_by_d: bool | None = arg(None, help="1/d_kv, not 1/sqrt; null: muP")
    scale_decoder_qk_dot_by_d: bool | None = arg(None, help="1/d_kv, not 1/sqrt; null: muP")
    scale_output_logits_by_d: bool = arg(False, help="muP logits by 1/w (false: 1/sqrt(w))")
    output_logits_alpha: Real | None = arg(None, help="muP logits multiplier (1 when null)")
    attention_module: str = arg("aiayn_attention", help="aiayn_attention only")
    extra_attention_params: dict[str, Any] = arg({}, help="not supported")
    dtype: str | None = arg(None, help="not supported")
    mlm_loss_scaling: Literal["num_masked", "precomputed_num_masked", "batch_size"] = arg(
        "batch_size", help="divide the masked loss sum by the batch, the tokens, or the "
        "loader's loss_weight"
    )  # fmt: skip
    lm_loss_weight: Real = arg(1.0, help="multiplies the loss under batch_size scaling")
    compute_eval_metrics: bool = arg(True, help="accuracy and perplexity in evaluation")

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "attention_softmax_fp32": CSX_ONLY,
        "attention_kernel": CSX_ONLY,
    }

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """The rules between keys, as Model Zoo's T5 has them."""
        yield from t5_problems(arguments)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)


def t5_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """Every broken rule of a ``t5`` / ``transformer`` section (complete keys)."""
    for key in _NUMBERS:
        value = arguments.get(key)
        if value is not None and not _is_number(value):
            yield about(key, f"must be a number, got {value!r}")
    for key in ("dropout_rate", "relu_dropout_rate", "label_smoothing"):
        value = arguments.get(key)
        if value is not None and _is_number(value) and not 0 <= float(value) <= 1:
            yield about(key, f"must be in [0, 1], got {value!r}")
    if arguments["norm_type"] not in ("layernorm", "rmsnorm"):
        yield about("norm_type", f"norm_type {arguments['norm_type']!r} is not supported "
                    "(layernorm, rmsnorm)")  # fmt: skip
    yield from _activation_problems(arguments)
    yield from _position_problems(arguments)
    tgt = arguments["tgt_vocab_size"] or arguments["src_vocab_size"]
    if arguments["share_encoder_decoder_embedding"] and tgt != arguments["src_vocab_size"]:
        message = "share_encoder_decoder_embedding needs tgt_vocab_size == src_vocab_size"
        yield about(("share_encoder_decoder_embedding", "tgt_vocab_size"), message)
    yield from _mup_problems(arguments)
    for key, default in _UNSUPPORTED.items():
        if arguments[key] != default:
            yield about(key, f"{key} = {arguments[key]!r} is not supported (only {default!r})")


def _activation_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    for key in ("encoder_nonlinearity", "decoder_nonlinearity"):
        value = arguments[key]
        if value is not None and value not in NONLINEARITIES:
            yield about(key, f"{key} {value!r} is not one of {', '.join(NONLINEARITIES)}")


def _position_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    kind = arguments["position_embedding_type"]
    if kind not in ("relative", "fixed", "learned_absolute", None):
        message = f"position_embedding_type {kind!r} is not supported (relative, fixed, " + (
            "learned_absolute)" if kind in ("rotary", "alibi") else "learned_absolute, null)"
        )
        yield about("position_embedding_type", message)
    if kind in ("fixed", "learned_absolute"):
        for key in ("src_max_position_embeddings", "tgt_max_position_embeddings"):
            if arguments[key] is None:
                yield about(key, f"{key} is required with position_embedding_type: {kind}")
    if kind == "fixed" and arguments["d_model"] % 2:
        yield about("d_model", "fixed positions need an even d_model")


def _mup_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    given = [k for k in ("mup_base_d_model", "mup_base_d_ff") if arguments[k] is not None]
    if len(given) == 1:
        yield about(given[0], "muP needs both mup_base_d_model and mup_base_d_ff")
    if given and arguments["use_transformer_initialization"]:
        message = "muP is supported only with use_transformer_initialization: false"
        yield about(("use_transformer_initialization", *given), message)
