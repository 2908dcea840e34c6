"""What several families' converters share (torch-free).

Activation names, grouped-query attention, rope scaling, and a Llama-style block's weight rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from plugtrain.conversion import ConfigKey, ConversionError, WeightRule
from plugtrain.conversion.configs import get_key
from plugtrain_models.converters.transforms import RopeRows

__all__ = [
    "GLU_FROM_HF",
    "LAYER",
    "PLAIN_FROM_HF",
    "both",
    "glu_activation",
    "gqa_from_hf",
    "gqa_to_hf",
    "llama_attention_rules",
    "llama_mlp_rules",
    "plain_activation",
    "rope_scaling_from_hf",
    "rope_scaling_to_hf",
]

LAYER = "transformer_decoder.layers.{layer}."
"""The prefix of one decoder block's plugtrain names."""

GLU_FROM_HF = {"silu": "swiglu", "swish": "swiglu", "relu": "reglu", "gelu": "geglu",
               "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh"}  # fmt: skip
"""A gated MLP's Hugging Face activation and plugtrain's GLU name (the same function)."""

PLAIN_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
                 "gelu_fast": "gelu_fast", "relu": "relu", "silu": "silu", "swish": "silu",
                 "quick_gelu": "quick_gelu", "tanh": "tanh"}  # fmt: skip
"""A plain MLP's Hugging Face activation and plugtrain's name (the tanh GELU is ``gelu_new``)."""


def _activation_maps(
    table: Mapping[str, str], key: str
) -> tuple[Callable[[Any], str], Callable[[Any], str]]:
    inverse = {v: k for k, v in reversed(list(table.items()))}

    def to_plugtrain(value: Any) -> str:
        if value not in table:
            known = ", ".join(table)
            raise ConversionError(f"config.json: {key} = {value!r} is not supported ({known})")
        return table[value]

    def to_hf(value: Any) -> str:
        if value not in inverse:
            known = ", ".join(inverse)
            raise ConversionError(
                f"model.nonlinearity = {value!r} has no Hugging Face name ({known})"
            )
        return inverse[value]

    return to_plugtrain, to_hf


def glu_activation(key: str, default: str) -> ConfigKey:
    """The row of a gated MLP's activation."""
    to_plugtrain, to_hf = _activation_maps(GLU_FROM_HF, key)
    return ConfigKey(key, "nonlinearity", default, to_plugtrain, to_hf)


def plain_activation(key: str, default: str) -> ConfigKey:
    """The row of a plain MLP's activation."""
    to_plugtrain, to_hf = _activation_maps(PLAIN_FROM_HF, key)
    return ConfigKey(key, "nonlinearity", default, to_plugtrain, to_hf)


def both(*hooks: Callable[[Mapping[str, Any], dict[str, Any]], None]) -> ConfigHook:
    """One config hook running ``hooks`` in order."""

    def run(source: Mapping[str, Any], target: dict[str, Any]) -> None:
        for hook in hooks:
            hook(source, target)

    return run


ConfigHook = Callable[[Mapping[str, Any], dict[str, Any]], None]


def gqa_from_hf(
    kv_key: str = "num_key_value_heads", heads_key: str = "num_attention_heads"
) -> ConfigHook:
    """A hook reading grouped-query attention (a kv head count) into ``attention_module``."""

    def hook(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
        heads = int(hf[heads_key])
        groups = hf.get(kv_key)
        groups = heads if groups is None else int(groups)
        if groups <= 0 or heads % groups:
            message = f"config.json: {kv_key} = {groups} must divide {heads_key} = {heads}"
            raise ConversionError(message)
        if groups == heads:
            keys["attention_module"] = "aiayn_attention"
        else:
            keys["attention_module"] = "multiquery_attention"
            keys["extra_attention_params"] = {"num_kv_groups": groups}

    return hook


def kv_groups(keys: Mapping[str, Any]) -> int:
    """The key/value head count of complete model keys."""
    if keys.get("attention_module") == "multiquery_attention":
        return int(get_key(keys, "extra_attention_params.num_kv_groups", 1))
    return int(keys["num_heads"])


def gqa_to_hf(kv_key: str = "num_key_value_heads") -> ConfigHook:
    """The inverse of :func:`gqa_from_hf`."""

    def hook(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
        hf[kv_key] = kv_groups(keys)

    return hook


_SCALING_TYPES = ("linear", "yarn", "llama3", "longrope")


def rope_scaling_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """``rope_scaling`` into ``pos_scaling_type`` / ``_factor`` / ``_extra_args``."""
    scaling = hf.get("rope_scaling")
    if not scaling:
        keys["pos_scaling_factor"] = 1.0
        return
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in _SCALING_TYPES:
        message = (
            f"config.json: rope_scaling type {kind!r} is not supported by plugtrain's decoder "
            f"({', '.join(_SCALING_TYPES)})"
        )
        raise ConversionError(message)
    extra = {k: v for k, v in scaling.items() if k not in {"rope_type", "type", "factor"}}
    keys["pos_scaling_type"] = kind
    keys["pos_scaling_factor"] = float(scaling.get("factor", 1.0))
    if kind == "yarn":
        extra.setdefault("original_max_position_embeddings", hf.get("max_position_embeddings"))
    keys["pos_scaling_extra_args"] = extra or None


def rope_scaling_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """The inverse of :func:`rope_scaling_from_hf`."""
    factor = float(keys.get("pos_scaling_factor") or 1.0)
    kind = keys.get("pos_scaling_type") or "linear"
    extra = dict(keys.get("pos_scaling_extra_args") or {})
    if factor == 1.0 and kind == "linear" and not extra:
        hf["rope_scaling"] = None
        return
    hf["rope_scaling"] = {"rope_type": kind, "factor": factor, **extra}


def whole_head_rotary(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """Refuse a partial rotary dimension where the architecture rotates whole heads."""
    from plugtrain_models.settings import resolve_settings

    settings = resolve_settings(keys, parallel=False)  # rotary_dim: null is a quarter head
    head_dim, rotary = settings.head_dim, settings.rotary_dim
    if rotary != head_dim:
        message = (
            f"model.rotary_dim = {keys.get('rotary_dim')} ({rotary} wide): Hugging Face "
            f"{hf['architectures'][0]} rotates the "
            f"whole head ({head_dim})"
        )
        raise ConversionError(message)


def llama_attention_rules(hf_layer: str, attention: str = "self_attn.") -> list[WeightRule]:
    """q, k, v and output projections as Llama names them (rotary rows reordered)."""
    ours = LAYER + "self_attn."
    theirs = hf_layer + attention
    return [
        WeightRule([theirs + "q_proj.{p}"], [ours + "proj_q_dense_layer.{p}"], RopeRows("q")),
        WeightRule([theirs + "k_proj.{p}"], [ours + "proj_k_dense_layer.{p}"], RopeRows("kv")),
        WeightRule([theirs + "v_proj.{p}"], [ours + "proj_v_dense_layer.{p}"]),
        WeightRule([theirs + "o_proj.{p}"], [ours + "proj_output_dense_layer.{p}"]),
        WeightRule([theirs + "rotary_emb.inv_freq"], []),
    ]


def llama_mlp_rules(hf_layer: str) -> list[WeightRule]:
    """Llama's gated MLP."""
    return [
        WeightRule(
            [hf_layer + "mlp.gate_proj.{p}"], [LAYER + "ffn.ffn.0.linear_layer_for_glu.{p}"]
        ),
        WeightRule([hf_layer + "mlp.up_proj.{p}"], [LAYER + "ffn.ffn.0.linear_layer.{p}"]),
        WeightRule([hf_layer + "mlp.down_proj.{p}"], [LAYER + "ffn.ffn.1.linear_layer.{p}"]),
    ]
