"""GPT-J, GPT-NeoX, Falcon and BLOOM: transformers' ``*ForCausalLM`` as plugtrain's decoders.

The first three are the GPT-J path (attention and FFN in parallel, rotary positions):

- GPT-J rotates interleaved pairs, as plugtrain does, so its q/k/v projections copy as they are.
- GPT-NeoX fuses q, k and v per head (``[head][q, k, v]``) and rotates halves of the first
  ``rotary_pct`` of each head: the fused projection is split and its rotary rows reordered. Its
  two norms per block are plugtrain's untied ``norm1``/``norm3``.
- Falcon fuses them per key/value group (``[group][q heads..., k, v]``; Falcon-7B has one group,
  the "new decoder architecture" of 40B and 180B several) and rotates whole heads. Falcon-7B and
  40B's original ``RefinedWebModel`` / ``RefinedWeb`` configs are read as well; export writes the
  transformers ``falcon`` style (``new_decoder_architecture``).

BLOOM is the GPT-2 path with ALiBi, a norm on the embeddings, per-head fused q/k/v and the tanh
GELU (``gelu_new``); its fixed ALiBi slopes, a parameter in plugtrain, are made on import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.conversion import (
    CheckpointConverter,
    ConfigKey,
    ConversionContext,
    ConversionError,
    WeightRule,
)
from plugtrain.conversion import headless as headless_variant
from plugtrain.conversion.configs import set_key
from plugtrain_models.converters.common import (
    LAYER,
    ConfigHook,
    both,
    kv_groups,
    plain_activation,
    rope_scaling_from_hf,
    rope_scaling_to_hf,
)
from plugtrain_models.converters.transforms import FusedHeads, WithAlibiSlopes
from plugtrain_models.settings import resolve_settings

__all__ = [
    "BLOOM",
    "BLOOM_HEADLESS",
    "FALCON",
    "FALCON_HEADLESS",
    "GPTJ",
    "GPTJ_HEADLESS",
    "GPT_NEOX",
    "GPT_NEOX_HEADLESS",
]

_ATTENTION = LAYER + "self_attn."
_QKV = [_ATTENTION + f"proj_{part}_dense_layer.{{p}}" for part in "qkv"]
_OUTPUT = _ATTENTION + "proj_output_dense_layer.{p}"
_FFN_IN = LAYER + "ffn.ffn.0.linear_layer.{p}"
_FFN_OUT = LAYER + "ffn.ffn.1.linear_layer.{p}"
_EMBEDDING = "embedding_layer.word_embeddings.weight"
_POST_NORM_RESIDUAL = "apply_residual_connection_post_layernorm"

_EXACT_SCALING = ("linear", "llama3")
_ROPE_SCALING = ("pos_scaling_type", "pos_scaling_factor", "pos_scaling_extra_args")


def _aliases(table: Mapping[str, tuple[str, str]]) -> ConfigHook:
    """A hook reading older ``config.json`` spellings: ``{old: (current, model key)}``.

    An old key counts only where the current one is absent (transformers reads it the same way).
    """

    def hook(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
        for old, (current, dotted) in table.items():
            if old in hf and current not in hf:
                set_key(keys, dotted, hf[old])

    return hook


def _exact_rope_scaling(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """``rope_scaling`` as :func:`rope_scaling_from_hf` reads it, where the decoder computes it.

    That is linear position scaling and llama3's frequencies; another type is an error.
    """
    scaling = hf.get("rope_scaling")
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if scaling and kind not in _EXACT_SCALING:
        message = (
            f"config.json: rope_scaling type {kind!r} is not supported by plugtrain's decoder "
            f"({', '.join(_EXACT_SCALING)})"
        )
        raise ConversionError(message)
    rope_scaling_from_hf(hf, keys)


def _filter_from_hidden(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """An unset FFN width is four times the hidden size, as transformers makes it."""
    if keys.get("filter_size") is None:
        keys["filter_size"] = 4 * int(keys["hidden_size"])


def _rotary_dim(keys: Mapping[str, Any]) -> int:
    """The width the decoder rotates (``rotary_dim: null`` is a quarter of the head)."""
    return resolve_settings(keys, parallel=True).rotary_dim


def _same_flags(
    keys: Mapping[str, Any], names: tuple[str, ...], hf_key: str, hf: Mapping[str, Any]
) -> bool:
    """The one value of model keys a single ``config.json`` flag stands for (else an error)."""
    values = {bool(keys[n]) for n in names}
    if len(values) != 1:
        shown = ", ".join(f"{n} = {keys[n]!r}" for n in names)
        message = (
            f"model.{names[0]} and the other flags differ ({shown}): Hugging Face "
            f"{hf['architectures'][0]} has one {hf_key} for all of them"
        )
        raise ConversionError(message)
    return values.pop()


def _old_masks(attention: str) -> list[WeightRule]:
    """Drop the causal-mask buffers older transformers saved (``bias``, ``masked_bias``)."""
    return [WeightRule([attention + "bias"], []), WeightRule([attention + "masked_bias"], [])]


# ------------------------------------------------------------------------------------- GPT-J

_GPTJ_LAYER = "transformer.h.{layer}."

_GPTJ_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 50400),
    ConfigKey("n_embd", "hidden_size", 4096),
    ConfigKey("n_layer", "num_hidden_layers", 28),
    ConfigKey("n_head", "num_heads", 16),
    ConfigKey("n_positions", "max_position_embeddings", 2048),
    ConfigKey("rotary_dim", "rotary_dim", 64),
    ConfigKey("n_inner", "filter_size", None),
    plain_activation("activation_function", "gelu_new"),
    ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", 1e-5),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", False),
    ConfigKey("initializer_range", "initializer_range", 0.02),
    ConfigKey("embd_pdrop", "embedding_dropout_rate", 0.0),
    ConfigKey("attn_pdrop", "attention_dropout_rate", 0.0),
    ConfigKey("resid_pdrop", "dropout_rate", 0.0),
)

_GPTJ_FIXED = {
    "position_embedding_type": "rotary",
    "rope_theta": 10000.0,
    "norm_type": "layernorm",
    "attention_type": "scaled_dot_product",
    "attention_module": "aiayn_attention",
    "use_projection_bias_in_attention": False,
    "use_ffn_bias_in_attention": False,
    "use_ffn_bias": True,
    "use_bias_in_output": True,
    "use_untied_layer_norm": False,
}


_GPTJ_IGNORED = frozenset({
    "rotary", "scale_attn_weights", "summary_activation", "summary_first_dropout",
    "summary_proj_to_labels", "summary_type", "summary_use_proj",
})  # fmt: skip
"""Keys of GPT-J's first files that transformers' GPT-J never reads."""


def _gptj_rotary(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """GPT-J needs a rotary width (without one transformers' GPT-J cannot run several heads)."""
    if keys.get("rotary_dim") is None:
        raise ConversionError("config.json: rotary_dim is null; GPT-J needs the rotated width")


def _gptj_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """The rotated width the decoder settles on (transformers needs a number)."""
    hf["rotary_dim"] = _rotary_dim(keys)


GPTJ = CheckpointConverter(
    model="gptj",
    hf_model_types=["gptj"],
    hf_architecture="GPTJForCausalLM",
    hf_prefix="transformer.",
    config=_GPTJ_CONFIG,
    weights=(
        WeightRule(["transformer.wte.weight"], [_EMBEDDING]),
        *(
            WeightRule([_GPTJ_LAYER + f"attn.{part}_proj.weight"], [name.replace("{p}", "weight")])
            for part, name in zip("qkv", _QKV, strict=True)
        ),
        WeightRule([_GPTJ_LAYER + "attn.out_proj.weight"], [_OUTPUT.replace("{p}", "weight")]),
        WeightRule([_GPTJ_LAYER + "ln_1.{p}"], [LAYER + "norm1.{p}"]),
        WeightRule([_GPTJ_LAYER + "mlp.fc_in.{p}"], [_FFN_IN]),
        WeightRule([_GPTJ_LAYER + "mlp.fc_out.{p}"], [_FFN_OUT]),
        WeightRule(["transformer.ln_f.{p}"], ["ln_f.{p}"]),
        WeightRule(["lm_head.{p}"], ["lm_head.{p}"]),
        *_old_masks(_GPTJ_LAYER + "attn."),
    ),
    plugtrain_fixed=_GPTJ_FIXED,
    hf_ignored=_GPTJ_IGNORED,
    config_to_plugtrain=both(_filter_from_hidden, _gptj_rotary),
    config_to_hf=_gptj_to_hf,
    note="GPT-J (GPTJForCausalLM): rotary pairs already interleaved; lm_head has a bias.",
)
GPTJ_HEADLESS = headless_variant(GPTJ, "GPTJModel")


# ---------------------------------------------------------------------------------- GPT-NeoX

_NEOX_LAYER = "gpt_neox.layers.{layer}."

_NEOX_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 50432),
    ConfigKey("hidden_size", "hidden_size", 6144),
    ConfigKey("num_hidden_layers", "num_hidden_layers", 44),
    ConfigKey("num_attention_heads", "num_heads", 64),
    ConfigKey("intermediate_size", "filter_size", 24576),
    plain_activation("hidden_act", "gelu"),
    ConfigKey("max_position_embeddings", "max_position_embeddings", 2048),
    ConfigKey("layer_norm_eps", "layer_norm_epsilon", 1e-5),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", False),
    ConfigKey("initializer_range", "initializer_range", 0.02),
    ConfigKey("attention_dropout", "attention_dropout_rate", 0.0),
    ConfigKey("hidden_dropout", "dropout_rate", 0.0),
    ConfigKey("attention_bias", "use_projection_bias_in_attention", True),
)

_NEOX_FIXED = {
    "position_embedding_type": "rotary",
    "norm_type": "layernorm",
    "attention_type": "scaled_dot_product",
    "attention_module": "aiayn_attention",
    "use_ffn_bias": True,
    "use_bias_in_output": False,
    "use_untied_layer_norm": True,
}


def _head_dim(keys: Mapping[str, Any]) -> int:
    return int(keys["hidden_size"]) // int(keys["num_heads"])


def _neox_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """Rotary base and width (``rotary_pct`` of each head, as transformers rounds it), biases."""
    keys["rope_theta"] = float(hf.get("rope_theta", 10000.0))
    factor = float(hf.get("partial_rotary_factor", 0.25))
    keys["rotary_dim"] = int(_head_dim(keys) * factor)
    keys["use_ffn_bias_in_attention"] = keys["use_projection_bias_in_attention"]
    keys["embedding_dropout_rate"] = keys["dropout_rate"]


def _neox_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """``rotary_emb_base`` and ``rotary_pct``: the spelling transformers 4 and 5 both read."""
    head_dim = _head_dim(keys)
    rotary = _rotary_dim(keys)
    factor = rotary / head_dim
    if int(head_dim * factor) != rotary:
        message = f"model.rotary_dim = {rotary} is no rotary_pct of the head ({head_dim})"
        raise ConversionError(message)
    hf["rotary_emb_base"] = float(keys["rope_theta"])
    hf["rotary_pct"] = factor
    hf["use_parallel_residual"] = True
    names = ("use_projection_bias_in_attention", "use_ffn_bias_in_attention")
    hf["attention_bias"] = _same_flags(keys, names, "attention_bias", hf)


GPT_NEOX = CheckpointConverter(
    model="gpt-neox",
    hf_model_types=["gpt_neox"],
    hf_architecture="GPTNeoXForCausalLM",
    hf_prefix="gpt_neox.",
    config=_NEOX_CONFIG,
    weights=(
        WeightRule(["gpt_neox.embed_in.weight"], [_EMBEDDING]),
        WeightRule([_NEOX_LAYER + "attention.query_key_value.{p}"], _QKV, FusedHeads(rope=True)),
        WeightRule([_NEOX_LAYER + "attention.dense.{p}"], [_OUTPUT]),
        WeightRule([_NEOX_LAYER + "input_layernorm.{p}"], [LAYER + "norm1.{p}"]),
        WeightRule([_NEOX_LAYER + "post_attention_layernorm.{p}"], [LAYER + "norm3.{p}"]),
        WeightRule([_NEOX_LAYER + "mlp.dense_h_to_4h.{p}"], [_FFN_IN]),
        WeightRule([_NEOX_LAYER + "mlp.dense_4h_to_h.{p}"], [_FFN_OUT]),
        WeightRule(["gpt_neox.final_layer_norm.{p}"], ["ln_f.{p}"]),
        WeightRule(["embed_out.weight"], ["lm_head.weight"]),  # transformers still saves this
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
        *_old_masks(_NEOX_LAYER + "attention."),
        WeightRule([_NEOX_LAYER + "attention.rotary_emb.inv_freq"], []),
        WeightRule(["gpt_neox.rotary_emb.inv_freq"], []),
    ),
    plugtrain_fixed=_NEOX_FIXED,
    hf_required={"use_parallel_residual": True},
    hf_ignored={"rope_theta", "partial_rotary_factor", "rope_scaling", "classifier_dropout"},
    config_to_plugtrain=both(_neox_from_hf, _exact_rope_scaling),
    config_to_hf=both(_neox_to_hf, rope_scaling_to_hf),
    plugtrain_handled={"rope_theta", "rotary_dim", "use_ffn_bias_in_attention", *_ROPE_SCALING},
    note="GPT-NeoX (GPTNeoXForCausalLM): per-head fused q/k/v split, partial rotary rows "
    "reordered; parallel residual with two norms.",
)
GPT_NEOX_HEADLESS = headless_variant(GPT_NEOX, "GPTNeoXModel")


# ------------------------------------------------------------------------------------ Falcon

_FALCON_LAYER = "transformer.h.{layer}."

_FALCON_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 65024),
    ConfigKey("hidden_size", "hidden_size", 4544),
    ConfigKey("num_hidden_layers", "num_hidden_layers", 32),
    ConfigKey("num_attention_heads", "num_heads", 71),
    ConfigKey("ffn_hidden_size", "filter_size", None),
    plain_activation("activation", "gelu"),
    ConfigKey("max_position_embeddings", "max_position_embeddings", 2048),
    ConfigKey("rope_theta", "rope_theta", 10000.0),
    ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", 1e-5),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ConfigKey("initializer_range", "initializer_range", 0.02),
    ConfigKey("attention_dropout", "attention_dropout_rate", 0.0),
    ConfigKey("hidden_dropout", "dropout_rate", 0.0),
    ConfigKey("bias", "use_projection_bias_in_attention", False),
)

_FALCON_OLD_NAMES = {
    "n_embed": ("hidden_size", "hidden_size"),
    "n_layer": ("num_hidden_layers", "num_hidden_layers"),
    "n_head": ("num_attention_heads", "num_heads"),
}
"""The ``RefinedWeb`` / ``RefinedWebModel`` spellings of Falcon-7B's and 40B's first files."""

_FALCON_FIXED = {
    "position_embedding_type": "rotary",
    "norm_type": "layernorm",
    "attention_type": "scaled_dot_product",
    "use_bias_in_output": False,
}

_FALCON_BIASES = ("use_projection_bias_in_attention", "use_ffn_bias_in_attention", "use_ffn_bias")

_FALCON_IGNORED = frozenset({
    "new_decoder_architecture", "multi_query", "num_kv_heads", "n_head_kv", "num_key_value_heads",
    "num_ln_in_parallel_attn", "rope_scaling", "auto_map", *_FALCON_OLD_NAMES,
})  # fmt: skip
"""Keys the hooks read (the layout, older spellings) or that only load code (``auto_map``)."""


def _falcon_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """Key/value groups and norms of the three layouts; whole-head rotary; one bias flag."""
    heads = int(keys["num_heads"])
    new = hf.get("new_decoder_architecture")
    if new is None:  # RefinedWeb (40B) files imply it by their model_type
        new = hf.get("model_type") == "RefinedWeb" or "n_head_kv" in hf
    if new:
        groups = hf.get("num_kv_heads", hf.get("n_head_kv"))
        groups = heads if groups is None else int(groups)
        norms = hf.get("num_ln_in_parallel_attn") or 2
    else:
        groups = 1 if hf.get("multi_query", True) else heads
        norms = 1
    if groups <= 0 or heads % groups:
        raise ConversionError(f"config.json: num_kv_heads = {groups} must divide {heads} heads")
    keys["attention_module"] = "multiquery_attention"  # Model Zoo's, whatever the count
    keys["extra_attention_params"] = {"num_kv_groups": groups}
    keys["use_untied_layer_norm"] = norms == 2
    keys["rotary_dim"] = _head_dim(keys)
    for name in _FALCON_BIASES[1:]:
        keys[name] = keys["use_projection_bias_in_attention"]
    keys["embedding_dropout_rate"] = 0.0


def _two_norms(context: ConversionContext) -> bool:
    return bool(context.keys.get("use_untied_layer_norm"))


def _one_norm(context: ConversionContext) -> bool:
    return not _two_norms(context)


def _falcon_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """Falcon-180B's style: the new decoder architecture with two norms per block."""
    head_dim = _head_dim(keys)
    if _rotary_dim(keys) != head_dim:
        message = (
            f"model.rotary_dim = {keys['rotary_dim']}: Hugging Face Falcon rotates the whole "
            f"head ({head_dim})"
        )
        raise ConversionError(message)
    groups = kv_groups(keys)
    if keys["use_untied_layer_norm"]:
        hf.update(
            new_decoder_architecture=True, num_kv_heads=groups, multi_query=groups == 1,
            num_ln_in_parallel_attn=2, parallel_attn=True, alibi=False,
        )  # fmt: skip
    else:  # Falcon-7B's layout: one norm per block, multi-query or a k and v per head
        if groups not in (1, int(keys["num_heads"])):
            message = (
                f"model.extra_attention_params.num_kv_groups = {groups}: Hugging Face Falcon "
                "with one norm per block has one key/value head or one per head"
            )
            raise ConversionError(message)
        hf.update(
            new_decoder_architecture=False, num_kv_heads=groups, multi_query=groups == 1,
            num_ln_in_parallel_attn=None, parallel_attn=True, alibi=False,
        )  # fmt: skip
    hf["bias"] = _same_flags(keys, _FALCON_BIASES, "bias", hf)


FALCON = CheckpointConverter(
    model="falcon",
    hf_model_types=["falcon", "RefinedWeb", "RefinedWebModel"],
    hf_architecture="FalconForCausalLM",
    hf_prefix="transformer.",
    config=_FALCON_CONFIG,
    weights=(
        WeightRule(["transformer.word_embeddings.weight"], [_EMBEDDING]),
        WeightRule(
            [_FALCON_LAYER + "self_attention.query_key_value.{p}"], _QKV, FusedHeads(rope=True)
        ),
        WeightRule([_FALCON_LAYER + "self_attention.dense.{p}"], [_OUTPUT]),
        WeightRule([_FALCON_LAYER + "ln_attn.{p}"], [LAYER + "norm1.{p}"], when=_two_norms),
        WeightRule([_FALCON_LAYER + "ln_mlp.{p}"], [LAYER + "norm3.{p}"], when=_two_norms),
        WeightRule([_FALCON_LAYER + "input_layernorm.{p}"], [LAYER + "norm1.{p}"], when=_one_norm),
        WeightRule([_FALCON_LAYER + "mlp.dense_h_to_4h.{p}"], [_FFN_IN]),
        WeightRule([_FALCON_LAYER + "mlp.dense_4h_to_h.{p}"], [_FFN_OUT]),
        WeightRule(["transformer.ln_f.{p}"], ["ln_f.{p}"]),
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
        WeightRule(["transformer.rotary_emb.inv_freq"], []),
    ),
    plugtrain_fixed=_FALCON_FIXED,
    hf_required={"alibi": False, "parallel_attn": True, _POST_NORM_RESIDUAL: False},
    hf_ignored=_FALCON_IGNORED,
    config_to_plugtrain=both(
        _aliases(_FALCON_OLD_NAMES), _filter_from_hidden, _falcon_from_hf, _exact_rope_scaling
    ),
    config_to_hf=both(_falcon_to_hf, rope_scaling_to_hf),
    plugtrain_handled={
        "attention_module",
        "extra_attention_params",
        "use_untied_layer_norm",
        "rotary_dim",
        *_FALCON_BIASES[1:],
        *_ROPE_SCALING,
    },
    note="Falcon (FalconForCausalLM; 7B and 40B RefinedWeb files read too): q/k/v fused per "
    "key/value group, rotary rows reordered; exports the 7B layout (one norm per block) or "
    "the new decoder architecture (two).",
)
FALCON_HEADLESS = headless_variant(FALCON, "FalconModel")


# ------------------------------------------------------------------------------------- BLOOM

_BLOOM_LAYER = "transformer.h.{layer}."

_BLOOM_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 250880),
    ConfigKey("hidden_size", "hidden_size", 64),
    ConfigKey("n_layer", "num_hidden_layers", 2),
    ConfigKey("n_head", "num_heads", 8),
    ConfigKey("seq_length", "max_position_embeddings", 2048),
    ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", 1e-5),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ConfigKey("initializer_range", "initializer_range", 0.02),
    ConfigKey("attention_dropout", "attention_dropout_rate", 0.0),
    ConfigKey("hidden_dropout", "dropout_rate", 0.0),
)

_BLOOM_OLD_NAMES = {
    "n_embed": ("hidden_size", "hidden_size"),
    "num_hidden_layers": ("n_layer", "num_hidden_layers"),
    "num_attention_heads": ("n_head", "num_heads"),
}
"""Spellings BigScience's own ``config.json`` files use (transformers maps them)."""

_BLOOM_FIXED = {
    "position_embedding_type": "alibi",
    "alibi_trainable_slopes": False,
    "embedding_layer_norm": True,
    "nonlinearity": "gelu_new",
    "norm_type": "layernorm",
    "attention_type": "scaled_dot_product",
    "attention_module": "aiayn_attention",
    "use_projection_bias_in_attention": True,
    "use_ffn_bias_in_attention": True,
    "use_ffn_bias": True,
    "use_bias_in_output": False,
}


_BLOOM_IGNORED = frozenset({
    "slow_but_exact", "masked_softmax_fusion", "attention_softmax_in_fp32", "bias_dropout_fusion",
    "skip_bias_add", "skip_bias_add_qkv", "offset_alibi", "unk_token_id", *_BLOOM_OLD_NAMES,
})  # fmt: skip
"""Megatron training switches in BigScience's files (no effect on the forward), old spellings."""


def _bloom_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """BLOOM's FFN is four times as wide as the model; it has no embedding dropout."""
    keys["filter_size"] = 4 * int(keys["hidden_size"])
    keys["embedding_dropout_rate"] = 0.0


def _bloom_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """Refuse an FFN width or attention width Hugging Face BLOOM cannot hold."""
    hidden = int(keys["hidden_size"])
    if int(keys["filter_size"]) != 4 * hidden:
        message = (
            f"model.filter_size = {keys['filter_size']}: Hugging Face BLOOM's FFN is "
            f"4 * hidden_size ({4 * hidden})"
        )
        raise ConversionError(message)
    inner = keys.get("attention_inner_dim")
    if inner is not None and int(inner) != hidden:
        message = f"model.attention_inner_dim = {inner}: Hugging Face BLOOM's is hidden_size"
        raise ConversionError(message)


BLOOM = CheckpointConverter(
    model="bloom",
    hf_model_types=["bloom"],
    hf_architecture="BloomForCausalLM",
    hf_prefix="transformer.",
    config=_BLOOM_CONFIG,
    weights=(
        WeightRule(["transformer.word_embeddings.weight"], [_EMBEDDING]),
        WeightRule(
            ["transformer.word_embeddings_layernorm.weight"],
            ["embedding_ln_f.weight", "embedding_layer.position_embed_helper.slopes"],
            WithAlibiSlopes(),
        ),
        WeightRule(["transformer.word_embeddings_layernorm.bias"], ["embedding_ln_f.bias"]),
        WeightRule([_BLOOM_LAYER + "input_layernorm.{p}"], [LAYER + "norm1.{p}"]),
        WeightRule([_BLOOM_LAYER + "self_attention.query_key_value.{p}"], _QKV, FusedHeads()),
        WeightRule([_BLOOM_LAYER + "self_attention.dense.{p}"], [_OUTPUT]),
        WeightRule([_BLOOM_LAYER + "post_attention_layernorm.{p}"], [LAYER + "norm3.{p}"]),
        WeightRule([_BLOOM_LAYER + "mlp.dense_h_to_4h.{p}"], [_FFN_IN]),
        WeightRule([_BLOOM_LAYER + "mlp.dense_4h_to_h.{p}"], [_FFN_OUT]),
        WeightRule(["transformer.ln_f.{p}"], ["ln_f.{p}"]),
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
    ),
    plugtrain_fixed=_BLOOM_FIXED,
    hf_fixed={_POST_NORM_RESIDUAL: False},
    hf_required={_POST_NORM_RESIDUAL: False},
    hf_ignored=_BLOOM_IGNORED,
    config_to_plugtrain=both(_aliases(_BLOOM_OLD_NAMES), _bloom_from_hf),
    config_to_hf=_bloom_to_hf,
    plugtrain_handled={"filter_size", "attention_inner_dim"},
    note="BLOOM (BloomForCausalLM): ALiBi, embedding norm, per-head fused q/k/v, tanh GELU "
    "(gelu_new).",
)
BLOOM_HEADLESS = headless_variant(BLOOM, "BloomModel")
