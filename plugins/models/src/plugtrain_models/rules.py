"""The rules between a decoder's keys (torch-free; the schemas' ``cross_check``).

Each rule yields :func:`plugtrain.schema.about` problems, which a run file places at the key's
line and column. Names of keys and values are Model Zoo's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from plugtrain.schema import Problem, about

__all__ = [
    "ACTIVATIONS",
    "GLU_ACTIVATIONS",
    "INITIALIZERS",
    "MOE_DEFAULTS",
    "NORM_TYPES",
    "gpt2_path_problems",
    "gptj_path_problems",
    "number",
]

ACTIVATIONS = (
    "gelu", "relu", "silu", "swish", "gelu_new", "gelu_fast", "quick_gelu", "squared_relu",
    "linear", "sigmoid", "tanh", "leaky_relu", "relu6", "elu", "selu", "mish",
)  # fmt: skip
"""Plain activations (``mz:layers/activations.py`` names)."""
GLU_ACTIVATIONS = {
    "swiglu": "silu",
    "geglu": "gelu",
    "geglu_tanh": "gelu_new",
    "reglu": "relu",
    "liglu": "linear",
}
"""GLU names and the activation on ``linear_layer_for_glu`` (``geglu_tanh``: the tanh GELU,
Hugging Face Gemma's ``gelu_pytorch_tanh``, is plugtrain's addition)."""
NORM_TYPES = ("layernorm", "rmsnorm", "biasless-layernorm")
INITIALIZERS = (
    "constant", "ones", "zeros", "eye", "uniform", "normal", "xavier_normal", "glorot_normal",
    "xavier_uniform", "glorot_uniform", "kaiming_normal", "kaiming_uniform", "truncated_normal",
    "variance_scaling", "lecun_normal", "lecun_uniform",
)  # fmt: skip
MOE_DEFAULTS: dict[str, Any] = {
    "num_experts": 0,
    "top_k": 1,
    "load_balancing_loss_coef": 0.0,
    "null_expert_bias": 0.0,
    "num_shared_experts": None,
    "routing_algorithm": "learned",
    "router_selection_nonlinearity": "softmax",
    "expert_weighting_nonlinearity": "softmax",
    "expert_weighting_normalization": True,
    "router_use_bias": False,
    "router_fp32": True,
    "gate_initializer": None,
    "probability_before_ffn": False,
    "moe_implementation": "experimental",
}
"""Every ``moe:`` key and its Model Zoo default."""

_NUMBERS = (
    "layer_norm_epsilon", "attention_dropout_rate", "loss_weight", "initializer_range",
    "rope_theta", "embeddings_scale", "mup_base_hidden_size", "mup_base_filter_size",
    "output_logits_alpha", "pos_scaling_factor", "attention_logits_alpha", "dropout_rate",
    "embedding_dropout_rate", "attention_logit_softcapping", "final_logit_softcapping",
    "output_logits_scale", "attention_qk_norm_eps", "temperature", "top_p",
)  # fmt: skip
_UNSUPPORTED_SHARED: dict[str, Any] = {
    "num_relative_attention_buckets": 32,
    "lr_adjustment_groups": None,
    "dtype": None,
}
_UNSUPPORTED_GPT2: dict[str, Any] = {
    "num_extra_input_vocab_tokens": 0,
    "constant_pos_embedding": None,
    "position_embedding_offset": 0,
    "attention_vertical_column_spacing": None,
    "attention_vertical_column_width": None,
    "attention_chunk_size": None,
    "attention_qk_norm_layer": None,
    "extra_ffn_params": {},
    "fixed_sparse_attention": None,
    "memory_tokens": None,
    "use_experimental_flex_api": False,
    "use_sink_token": False,
    "ffn_initializer": None,
    "ffn_output_layer_initializer": None,
    "cross_attention_layers": [],
    "rel_distance_mode": "default",
    "rel_distance_extra_args": None,
}


def number(value: Any) -> float | None:
    """``value`` as a float (numeric strings too), ``None`` for ``None``."""
    if value is None:
        return None
    return float(value)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _shared_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    for key in _NUMBERS:
        value = arguments.get(key)
        if isinstance(value, str) and not _is_number(value):
            yield about(key, f"must be a number, got {value!r}")
    activation = arguments["nonlinearity"]
    if activation not in ACTIVATIONS and activation not in GLU_ACTIVATIONS:
        known = ", ".join((*ACTIVATIONS, *GLU_ACTIVATIONS))
        yield about("nonlinearity", f"unknown nonlinearity {activation!r}; known: {known}")
    if arguments["norm_type"] not in NORM_TYPES:
        message = f"norm_type {arguments['norm_type']!r} is not supported; use one of {NORM_TYPES}"
        yield about("norm_type", message)
    if arguments["position_embedding_type"] == "relative":
        yield about("position_embedding_type", "relative positions are not supported yet")
    yield from _attention_problems(arguments)
    yield from _rotary_problems(arguments)
    yield from _mup_problems(arguments)
    yield from _initializer_problems(arguments)
    yield from _moe_problems(arguments)
    yield from _unsupported(arguments, _UNSUPPORTED_SHARED)


def _attention_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    heads = arguments["num_heads"]
    hidden = arguments["hidden_size"]
    inner = arguments.get("attention_inner_dim") or hidden
    if hidden % heads:
        yield about("num_heads", f"hidden_size {hidden} is not a multiple of num_heads {heads}")
    if inner % heads:
        yield about("attention_inner_dim", f"{inner} is not a multiple of num_heads {heads}")
    extra = arguments["extra_attention_params"] or {}
    unknown = sorted(set(extra) - {"num_kv_groups"})
    if unknown:
        message = f"unknown extra_attention_params {unknown}; accepted: num_kv_groups"
        yield about("extra_attention_params", message)
    groups = extra.get("num_kv_groups")
    if groups is not None and arguments["attention_module"] == "aiayn_attention":
        message = "num_kv_groups needs attention_module: multiquery_attention"
        yield about(("extra_attention_params", "attention_module"), message)
    if groups is not None and (not isinstance(groups, int) or groups < 1 or heads % groups):
        message = f"num_kv_groups must be a positive divisor of num_heads {heads}, got {groups!r}"
        yield about("extra_attention_params", message)


def _rotary_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    inner = arguments.get("attention_inner_dim") or arguments["hidden_size"]
    head_dim = inner // arguments["num_heads"]
    rotary = arguments["rotary_dim"]
    rotating = arguments["position_embedding_type"] == "rotary" and rotary is not None
    if rotating and (rotary % 2 or rotary > head_dim):
        message = f"rotary_dim must be even and at most head_dim {head_dim}, got {rotary}"
        yield about("rotary_dim", message)
    scaling = str(arguments["pos_scaling_type"]).lower()
    if scaling not in ("linear", "llama3"):
        message = f"pos_scaling_type {arguments['pos_scaling_type']!r} is not supported yet"
        yield about("pos_scaling_type", message + " (linear, llama3)")
    if scaling == "llama3":
        extra = arguments["pos_scaling_extra_args"] or {}
        wanted = ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        missing = [k for k in wanted if k not in extra]
        if missing:
            yield about("pos_scaling_extra_args", f"llama3 scaling needs {', '.join(missing)}")


def _mup_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    bases = ("mup_base_hidden_size", "mup_base_filter_size")
    given = [key for key in bases if arguments[key] is not None]
    if len(given) == 1:
        yield about(given[0], "give both mup_base_hidden_size and mup_base_filter_size")
    if given and arguments.get("output_logits_scale") is not None:
        message = "output_logits_scale is derived under muP; drop it or the mup_base_* keys"
        yield about("output_logits_scale", message)


def _initializer_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    for key in ("initializer", "embedding_initializer", "output_layer_initializer"):
        spec = arguments[key]
        name = spec.get("name") if isinstance(spec, Mapping) else spec
        if spec is not None and name not in INITIALIZERS:
            yield about(key, f"unknown initializer {name!r}; known: {', '.join(INITIALIZERS)}")


def _moe_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    moe = arguments["moe"]
    if moe is None:
        return
    if not isinstance(moe, Mapping):
        yield about("moe", "must be a mapping")
        return
    unknown = sorted(set(moe) - set(MOE_DEFAULTS))
    if unknown:
        yield about("moe", f"unknown moe keys {unknown}; accepted: {', '.join(MOE_DEFAULTS)}")
        return
    merged = {**MOE_DEFAULTS, **moe}
    experts = merged["num_experts"]
    if not 1 <= merged["top_k"] <= max(experts, 1):
        yield about("moe", f"top_k must be in 1..num_experts, got {merged['top_k']}")
    for key in ("routing_algorithm", "router_selection_nonlinearity"):
        wanted = "learned" if key == "routing_algorithm" else "softmax"
        if merged[key] != wanted:
            yield about("moe", f"moe.{key}: {merged[key]!r} is not supported yet ({wanted})")
    if merged["expert_weighting_nonlinearity"] != "softmax" or merged["probability_before_ffn"]:
        yield about("moe", "only softmax expert weighting after the FFN is supported yet")


def _unsupported(arguments: Mapping[str, Any], table: Mapping[str, Any]) -> Iterator[Problem]:
    for key, default in table.items():
        if key in arguments and arguments[key] != default:
            yield about(key, f"{key} is not supported by plugtrain-models yet")


def gpt2_path_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """Every broken rule of a GPT-2-path decoder's keys."""
    yield from _shared_problems(arguments)
    yield from _unsupported(arguments, _UNSUPPORTED_GPT2)
    if arguments.get("attention_qk_norm_eps") not in (1e-5, "1e-5", "1e-05"):
        yield about("attention_qk_norm_eps", "attention_qk_norm_eps is not supported yet")


def gptj_path_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    """Every broken rule of a GPT-J-path decoder's keys."""
    yield from _shared_problems(arguments)
    if arguments["position_embedding_type"] == "alibi":
        yield about("position_embedding_type", "ALiBi is not available on the GPT-J path")
    sinks = arguments["attention_sink_tokens"]
    if sinks and arguments["attention_sliding_window_length"] is None:
        message = "attention_sink_tokens needs attention_sliding_window_length"
        yield about("attention_sink_tokens", message)
