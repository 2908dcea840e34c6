"""The rules between the keys of a BERT-family section (torch-free; the schemas' ``cross_check``).

Each rule yields :func:`plugtrain.schema.about` problems, which a run file places at the key's
line. Names of keys and values are Model Zoo's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plugtrain.schema import Problem, about
from plugtrain_models.encoder_data.paths import path_problems
from plugtrain_models.rules import ACTIVATIONS, GLU_ACTIVATIONS

__all__ = ["PROBLEM_TYPES", "bert_problems", "head_problems"]

_NUMBERS = (
    "layer_norm_epsilon", "dropout_rate", "attention_dropout_rate", "embedding_dropout_rate",
    "initializer_range", "rope_theta", "pos_scaling_factor", "mlm_loss_weight",
    "label_smoothing", "mup_base_hidden_size", "mup_base_filter_size", "embeddings_scale",
    "attention_logits_alpha", "output_logits_alpha", "task_dropout", "loss_weight",
    "encoder_output_dropout_rate",
)  # fmt: skip
_UNSUPPORTED: dict[str, Any] = {
    "attention_module": "aiayn_attention",
    "extra_attention_params": {},
    "num_relative_attention_buckets": 32,
    "alibi_trainable_slopes": False,
    "pos_scaling_factor": 1.0,
    "pos_scaling_type": "linear",
    "pos_scaling_extra_args": None,
    "freeze_ffn_bias_in_glu": False,
    "lr_adjustment_groups": None,
    "dtype": None,
}
_POSITIONS = ("learned", "rotary", None)
PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _unsupported(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    for key, default in _UNSUPPORTED.items():
        if key in arguments and arguments[key] != default:
            value = arguments[key]
            yield about(key, f"{key}: {value!r} is not supported by plugtrain-models")


def _activation(arguments: Mapping[str, Any], key: str) -> Iterator[Problem]:
    name = arguments.get(key)
    if name is not None and name not in ACTIVATIONS and name not in GLU_ACTIVATIONS:
        known = ", ".join((*ACTIVATIONS, *GLU_ACTIVATIONS))
        yield about(key, f"unknown nonlinearity {name!r}; known: {known}")


def bert_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """Every broken rule of a BERT-family encoder's keys (``bert``, ``esm2``, the heads)."""
    for key in _NUMBERS:
        value = arguments.get(key)
        if isinstance(value, str) and not _is_number(value):
            yield about(key, f"must be a number, got {value!r}")
    for key in ("encoder_nonlinearity", "pooler_nonlinearity", "mlm_nonlinearity"):
        yield from _activation(arguments, key)
    hidden, heads = arguments["hidden_size"], arguments["num_heads"]
    if hidden % heads:
        yield about("num_heads", f"hidden_size {hidden} is not a multiple of num_heads {heads}")
    positions = arguments["position_embedding_type"]
    if positions not in _POSITIONS:
        message = f"position_embedding_type {positions!r} is not supported (learned, rotary)"
        yield about("position_embedding_type", message)
    if positions is not None and arguments["max_position_embeddings"] is None:
        message = "max_position_embeddings should be specified if position_embedding_type is"
        yield about(("max_position_embeddings", "position_embedding_type"), message)
    rotary = arguments.get("rotary_dim")
    if positions == "rotary" and rotary is not None and (rotary % 2 or rotary > hidden // heads):
        message = f"rotary_dim must be even and at most the head size {hidden // heads}"
        yield about("rotary_dim", f"{message}, got {rotary}")
    if arguments.get("mask_padding_in_positional_embed") and positions != "learned":
        message = "mask_padding_in_positional_embed needs learned positions"
        yield about("mask_padding_in_positional_embed", message)
    if arguments.get("token_dropout") and arguments.get("mask_token_id") is None:
        yield about("token_dropout", "mask_token_id must be given when token_dropout is on")
    bases = [k for k in ("mup_base_hidden_size", "mup_base_filter_size") if arguments[k]]
    if len(bases) == 1:
        yield about(bases[0], "give both mup_base_hidden_size and mup_base_filter_size")
    yield from _unsupported(arguments)


def head_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """The fine-tuning heads' rules: the encoder's, the problem type, the files they name."""
    yield from bert_problems(arguments)
    problem_type = arguments.get("problem_type")
    if "problem_type" in arguments and problem_type not in PROBLEM_TYPES:
        message = f"problem_type {problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}"
        yield about("problem_type", message)
    for key in ("vocab_file", "label_vocab_file"):
        yield from path_problems(key, arguments.get(key), folder=False)
