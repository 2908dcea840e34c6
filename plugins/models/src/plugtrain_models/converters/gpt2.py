"""GPT-2 (and gpt3), StarCoder and SantaCoder (GPTBigCode), JAIS and BTLM as plugtrain decoders.

All are GPT-2 blocks: pre-norm LayerNorms with biases, a fused q/k/v projection, a plain MLP
(JAIS and BTLM: SwiGLU, its gate in ``c_fc2``). GPT-2, JAIS and BTLM store every projection as a
Conv1D ``[in, out]`` (transposed into a Linear's ``[out, in]``) with ``c_attn``'s columns
``[q | k | v]``; GPTBigCode stores Linears, its ``c_attn`` rows ``[q heads..., k, v]`` with
multi-query attention and ``[head][q, k, v]`` without. JAIS and BTLM keep muP in their config
(``mup_*``) and ALiBi slopes as a tensor; GPT-2 and GPTBigCode have neither, so export folds a
muP model's scales into its weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from plugtrain.conversion import CheckpointConverter, ConfigKey, ConversionError, WeightRule
from plugtrain.conversion import headless as headless_variant
from plugtrain.schema import arg_infos
from plugtrain_models.converters.common import LAYER, PLAIN_FROM_HF, both, kv_groups
from plugtrain_models.converters.transforms import Chunks, FusedHeads, Transposed
from plugtrain_models.schemas import Gpt2PathArgs
from plugtrain_models.settings import resolve_settings

__all__ = [
    "BTLM",
    "BTLM_HEADLESS",
    "GPT2",
    "GPT2_HEADLESS",
    "JAIS",
    "JAIS_HEADLESS",
    "SANTACODER",
    "SANTACODER_HEADLESS",
    "STARCODER",
    "STARCODER_HEADLESS",
    "fold_mup",
]

_PREFIX = "transformer."
_HF_LAYER = _PREFIX + "h.{layer}."
_ATTENTION = LAYER + "self_attn."


# ------------------------------------------------------------------------------ config pieces


def _activation_row(default: str, table: Mapping[str, str]) -> ConfigKey:
    """``activation_function`` as ``nonlinearity``: the same function, not the nearest name."""
    inverse = {ours: theirs for theirs, ours in reversed(list(table.items()))}

    def to_plugtrain(value: Any) -> str:
        if value not in table:
            known = ", ".join(table)
            message = f"config.json: activation_function = {value!r} is not supported ({known})"
            raise ConversionError(message)
        return table[value]

    def to_hf(value: Any) -> str:
        if value not in inverse:
            known = ", ".join(inverse)
            message = f"model.nonlinearity = {value!r} has no Hugging Face name ({known})"
            raise ConversionError(message)
        return inverse[value]

    return ConfigKey("activation_function", "nonlinearity", default, to_plugtrain, to_hf)


def _attention_type(scaled: Any) -> str:
    return "scaled_dot_product" if scaled else "dot_product"


def _scale_attn_weights(attention_type: Any) -> bool:
    return attention_type == "scaled_dot_product"


def _number(value: Any) -> float:
    return float(value)


_GPT2_CONFIG = (
    ConfigKey("vocab_size", "vocab_size", 50257),
    ConfigKey("n_embd", "hidden_size", 768),
    ConfigKey("n_layer", "num_hidden_layers", 12),
    ConfigKey("n_head", "num_heads", 12),
    ConfigKey("n_positions", "max_position_embeddings", 1024),
    ConfigKey("resid_pdrop", "dropout_rate", 0.1, _number, _number),
    ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", 1e-5, _number, _number),
    ConfigKey("initializer_range", "initializer_range", 0.02, _number, _number),
    ConfigKey("tie_word_embeddings", "share_embedding_weights", True),
    ConfigKey("scale_attn_weights", "attention_type", True, _attention_type, _scale_attn_weights),
)

_GPT2_FIXED = {
    "norm_type": "layernorm",
    "use_projection_bias_in_attention": True,
    "use_ffn_bias_in_attention": True,
    "use_ffn_bias": True,
    "use_bias_in_output": False,
    "embedding_layer_norm": False,
}

_GPT2_IGNORED = frozenset({
    "n_inner", "embd_pdrop", "attn_pdrop", "n_ctx", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    # the same function, with the softmax's input upcast and scaled first (float32: no change)
    "reorder_and_upcast_attn",
})  # fmt: skip

_GPT2_HANDLED = frozenset({"filter_size", "embedding_dropout_rate", "attention_dropout_rate"})


def _widths_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """``n_inner`` (null: 4 * n_embd) and the dropouts a table cannot default."""
    inner = hf.get("n_inner")
    keys["filter_size"] = int(inner) if inner is not None else 4 * int(keys["hidden_size"])
    keys["embedding_dropout_rate"] = float(hf.get("embd_pdrop", 0.1))
    keys["attention_dropout_rate"] = float(hf.get("attn_pdrop", 0.1))


def _widths_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """The inverse of :func:`_widths_from_hf` (a null dropout is ``dropout_rate``)."""
    hf["n_inner"] = int(keys["filter_size"])
    dropout = float(keys["dropout_rate"])
    pairs = (("embd_pdrop", "embedding_dropout_rate"), ("attn_pdrop", "attention_dropout_rate"))
    for hf_key, key in pairs:
        value = keys.get(key)
        hf[hf_key] = dropout if value is None else float(value)


# ----------------------------------------------------------------------------- weight rules


def _block_rules(attention: WeightRule, glu: bool, conv1d: bool) -> list[WeightRule]:
    """One GPT-2 block's rules, with ``attention`` the rule of its fused ``c_attn``."""
    copy = Transposed() if conv1d else None
    rules = [
        WeightRule([_HF_LAYER + "ln_1.{p}"], [LAYER + "norm1.{p}"]),
        WeightRule([_HF_LAYER + "ln_2.{p}"], [LAYER + "norm3.{p}"]),
        attention,
        WeightRule(
            [_HF_LAYER + "attn.c_proj.{p}"], [_ATTENTION + "proj_output_dense_layer.{p}"], copy
        ),
        WeightRule([_HF_LAYER + "mlp.c_fc.{p}"], [LAYER + "ffn.ffn.0.linear_layer.{p}"], copy),
        WeightRule([_HF_LAYER + "mlp.c_proj.{p}"], [LAYER + "ffn.ffn.1.linear_layer.{p}"], copy),
        # causal-mask buffers older GPT-2 checkpoints hold
        WeightRule([_HF_LAYER + "attn.bias"], []),
        WeightRule([_HF_LAYER + "attn.masked_bias"], []),
    ]
    if glu:
        gate = [LAYER + "ffn.ffn.0.linear_layer_for_glu.{p}"]
        rules.insert(4, WeightRule([_HF_LAYER + "mlp.c_fc2.{p}"], gate, copy))
    return rules


def _qkv(transform: Any) -> WeightRule:
    ours = [_ATTENTION + f"proj_{part}_dense_layer.{{p}}" for part in "qkv"]
    return WeightRule([_HF_LAYER + "attn.c_attn.{p}"], ours, transform)


def _model_rules(
    block: list[WeightRule], extra: tuple[WeightRule, ...] = ()
) -> tuple[WeightRule, ...]:
    return (
        WeightRule([_PREFIX + "wte.weight"], ["embedding_layer.word_embeddings.weight"]),
        WeightRule([_PREFIX + "wpe.weight"], ["embedding_layer.position_embeddings.embed.weight"]),
        *extra,
        *block,
        WeightRule([_PREFIX + "ln_f.{p}"], ["ln_f.{p}"]),
        WeightRule(["lm_head.weight"], ["lm_head.weight"]),
    )


def _also_unprefixed(rules: tuple[WeightRule, ...]) -> tuple[WeightRule, ...]:
    """``rules``, then each again without ``transformer.``.

    The published GPT-2 checkpoints were saved from the base model under the head model's config:
    import reads either; export writes the prefixed names (the first rule a name matches).
    """
    bare = tuple(
        attrs.evolve(rule, hf=tuple(n.removeprefix(_PREFIX) for n in rule.hf))
        for rule in rules
        if rule.hf and all(n.startswith(_PREFIX) for n in rule.hf)
    )
    return rules + bare


# ------------------------------------------------------------------------------- muP folding

_MUP_KEYS = (
    "embeddings_scale", "attention_logits_alpha", "scale_qk_dot_by_d", "output_logits_scale",
    "output_logits_alpha", "mup_base_hidden_size", "mup_base_filter_size",
    "scale_output_logits_by_d",
)  # fmt: skip


def _standard_parametrisation() -> dict[str, Any]:
    """The muP keys at their defaults (the decoder's schema's)."""
    defaults = {info.name: info.default for info in arg_infos(Gpt2PathArgs)}
    return {key: defaults[key] for key in _MUP_KEYS}


def _scaled(tensor: Any, factor: float) -> Any:
    """``tensor * factor``, computed in float64 and rounded once to the tensor's dtype."""
    return (tensor.double() * factor).to(tensor.dtype)


def fold_mup(state: dict[str, Any], keys: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A GPT-2-path model's muP scales folded into its weights (standard parametrisation).

    The embeddings (or the embedding norm) take ``embeddings_scale``; each layer's key projection
    takes what the attention scale has beyond ``1/sqrt(d)`` (``attention_logits_alpha``, and
    ``1/sqrt(d)`` more under ``scale_qk_dot_by_d``); ``lm_head`` takes the logits' scale (muP's
    ``output_logits_alpha / width``, or ``output_logits_scale``), untied from the embedding when
    the two then differ. The muP keys go back to their defaults. The input is not modified.
    """
    s = resolve_settings(keys, parallel=False)
    embedding = s.embeddings_scale
    key_scale = s.attention_alpha / (math.sqrt(s.head_dim) if s.qk_by_d else 1.0)
    logits = s.logits_scale if s.logits_scale is not None else 1.0
    folded_keys = {**keys, **_standard_parametrisation()}
    if embedding == 1.0 and key_scale == 1.0 and logits == 1.0:
        return state, folded_keys
    names = {name.removeprefix("model."): name for name in state}
    word = "embedding_layer.word_embeddings.weight"
    prefix = names[word][: -len(word)]
    folded = dict(state)

    def scale(name: str, factor: float) -> None:
        if factor != 1.0 and name in names:
            folded[names[name]] = _scaled(state[names[name]], factor)

    untie = s.tied and (logits != 1.0 or (embedding != 1.0 and not s.embedding_norm))
    if untie or (logits != 1.0 and "lm_head.weight" in names):
        head = state[names["lm_head.weight"]] if not s.tied else state[names[word]]
        folded[prefix + "lm_head.weight"] = _scaled(head, logits)
        scale("lm_head.bias", logits)
        if untie:
            folded_keys["share_embedding_weights"] = False
    if s.embedding_norm:
        embeddings = ("embedding_ln_f.weight", "embedding_ln_f.bias")
    else:
        embeddings = (word, "embedding_layer.position_embeddings.embed.weight")
    for name in embeddings:
        scale(name, embedding)
    for layer in range(s.num_layers):
        for part in ("weight", "bias"):
            scale(f"{LAYER.format(layer=layer)}self_attn.proj_k_dense_layer.{part}", key_scale)
    return folded, folded_keys


# ------------------------------------------------------------------------------------- GPT-2

GPT2 = CheckpointConverter(
    model="gpt2",
    hf_model_types=["gpt2"],
    hf_architecture="GPT2LMHeadModel",
    hf_prefix=_PREFIX,
    config=(
        *_GPT2_CONFIG,
        _activation_row("gelu_new", PLAIN_FROM_HF),
        ConfigKey("scale_attn_by_inverse_layer_idx", "scale_qk_dot_by_layer_idx", False),
    ),
    weights=_also_unprefixed(_model_rules(_block_rules(_qkv(Chunks(conv1d=True)), False, True))),
    plugtrain_fixed={**_GPT2_FIXED, "position_embedding_type": "learned"},
    hf_ignored=_GPT2_IGNORED,
    config_to_plugtrain=_widths_from_hf,
    config_to_hf=_widths_to_hf,
    plugtrain_handled=_GPT2_HANDLED,
    fold_mup=fold_mup,
    note="GPT-2 (GPT2LMHeadModel; gpt3 too): Conv1D weights transposed, c_attn split in three; "
    "muP folded into the weights on export.",
)
GPT2_HEADLESS = headless_variant(GPT2, "GPT2Model")


# ------------------------------------------------------------------------------- GPTBigCode


def _multi_query_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """``multi_query`` (one key/value head) or full multi-head attention."""
    if hf.get("multi_query", True):
        keys["attention_module"] = "multiquery_attention"
        keys["extra_attention_params"] = {"num_kv_groups": 1}
    else:
        keys["attention_module"] = "aiayn_attention"


def _multi_query_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """The inverse of :func:`_multi_query_from_hf`; grouped-query attention has no equivalent."""
    groups, heads = kv_groups(keys), int(keys["num_heads"])
    if groups not in (1, heads):
        message = (
            f"model.extra_attention_params.num_kv_groups = {groups}: Hugging Face GPTBigCode has "
            f"one key/value head (multi_query) or {heads} (one per head), nothing between"
        )
        raise ConversionError(message)
    hf["multi_query"] = groups == 1


_BIGCODE_IGNORED = frozenset({
    "multi_query", "num_key_value_heads",
    # the softmax's precision: the same function in float32
    "attention_softmax_in_fp32", "scale_attention_softmax_in_fp32",
})  # fmt: skip


def _bigcode(model: str, note: str) -> CheckpointConverter:
    return CheckpointConverter(
        model=model,
        hf_model_types=["gpt_bigcode"],
        hf_architecture="GPTBigCodeForCausalLM",
        hf_prefix=_PREFIX,
        config=(*_GPT2_CONFIG, _activation_row("gelu_pytorch_tanh", PLAIN_FROM_HF)),
        weights=_model_rules(_block_rules(_qkv(FusedHeads()), False, False)),
        plugtrain_fixed={**_GPT2_FIXED, "position_embedding_type": "learned"},
        hf_ignored=_GPT2_IGNORED | _BIGCODE_IGNORED,
        config_to_plugtrain=both(_widths_from_hf, _multi_query_from_hf),
        config_to_hf=both(_widths_to_hf, _multi_query_to_hf),
        plugtrain_handled=_GPT2_HANDLED | {"attention_module", "extra_attention_params"},
        fold_mup=fold_mup,
        note=note,
    )


STARCODER = _bigcode(
    "starcoder",
    "StarCoder (GPTBigCodeForCausalLM): multi-query c_attn split into q, k, v; muP folded "
    "into the weights on export.",
)
STARCODER_HEADLESS = headless_variant(STARCODER, "GPTBigCodeModel")
SANTACODER = attrs.evolve(
    _bigcode(
        "santacoder",
        "SantaCoder as transformers' GPTBigCode (GPTBigCodeForCausalLM), as StarCoder.",
    ),
    detected=False,  # a GPTBigCode config.json without --model is StarCoder's
)
SANTACODER_HEADLESS = headless_variant(SANTACODER, "GPTBigCodeModel")


# ------------------------------------------------------------------------------ JAIS and BTLM

_MUP_FROM_HF = {"mup_width_scale": 1.0, "mup_output_alpha": 1.0, "mup_embeddings_scale": 1.0}


def _tidy(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _mup_from_hf(hf: Mapping[str, Any], keys: dict[str, Any]) -> None:
    """``mup_*`` as the decoder's muP keys; ``mup_width_scale`` is base width / width."""
    width, alpha, embedding = (float(hf.get(k, default)) for k, default in _MUP_FROM_HF.items())
    keys["embeddings_scale"] = embedding
    # without scale_attn_weights the scores are not divided at all, whatever mup_* says
    scaled = bool(hf.get("scale_attn_weights", True))
    keys["scale_qk_dot_by_d"] = scaled and bool(hf.get("mup_scale_qk_dot_by_d", False))
    if width != 1.0:
        keys["mup_base_hidden_size"] = _tidy(int(keys["hidden_size"]) * width)
        keys["mup_base_filter_size"] = _tidy(int(keys["filter_size"]) * width)
        keys["output_logits_alpha"] = alpha
    elif alpha != 1.0:
        keys["output_logits_scale"] = alpha
    scaling = hf.get("alibi_scaling")
    keys["pos_scaling_factor"] = 1.0
    if scaling:
        if scaling.get("train_seq_len") is not None or "factor" not in scaling:
            message = (
                f"config.json: alibi_scaling = {scaling!r}: only a fixed linear factor "
                "({'type': 'linear', 'factor': f}) is supported, not dynamic scaling"
            )
            raise ConversionError(message)
        keys["pos_scaling_factor"] = float(scaling["factor"])


def _mup_to_hf(keys: Mapping[str, Any], hf: dict[str, Any]) -> None:
    """The inverse of :func:`_mup_from_hf`: the same embedding, attention and logits scales."""
    s = resolve_settings(keys, parallel=False)
    width = 1.0 / s.mup_width if s.mup_width is not None else 1.0
    hf["mup_width_scale"] = width
    hf["mup_output_alpha"] = (s.logits_scale if s.logits_scale is not None else 1.0) / width
    hf["mup_embeddings_scale"] = s.embeddings_scale
    # the scores are divided by d ** (0.5 * scaled + 0.5 * qk_by_d): say the same power
    power = int(s.scaled) + int(s.qk_by_d)
    hf["scale_attn_weights"] = power > 0
    hf["mup_scale_qk_dot_by_d"] = power == 2
    factor = s.pos_scaling_factor
    hf["alibi_scaling"] = None if factor == 1.0 else {"type": "linear", "factor": factor}


def _positions(kind: Any) -> str:
    if kind not in ("learned", "alibi"):
        message = f"position_embedding_type = {kind!r}: JAIS and BTLM have learned or alibi"
        raise ConversionError(message)
    return str(kind)


_BOTH_WAYS = (_positions, _positions)


_ALIBI_GLU_ACTIVATIONS = {**PLAIN_FROM_HF, "swiglu": "swiglu"}
"""JAIS's and BTLM's activations: ``swiglu`` is ``c_fc(x) * silu(c_fc2(x))``, plugtrain's."""


def _alibi_family(
    model: str, model_type: str, architecture: str, auto_map: dict[str, str], note: str
) -> CheckpointConverter:
    slopes = WeightRule(
        [_PREFIX + "relative_pe.slopes"], ["embedding_layer.position_embed_helper.slopes"]
    )
    return CheckpointConverter(
        model=model,
        hf_model_types=[model_type],
        hf_architecture=architecture,
        hf_prefix=_PREFIX,
        config=(
            *_GPT2_CONFIG,
            _activation_row("gelu_new", _ALIBI_GLU_ACTIVATIONS),
            ConfigKey("scale_attn_by_inverse_layer_idx", "scale_qk_dot_by_layer_idx", False),
            ConfigKey("position_embedding_type", "position_embedding_type", "learned", *_BOTH_WAYS),
        ),
        weights=_model_rules(_block_rules(_qkv(Chunks(conv1d=True)), True, True), (slopes,)),
        plugtrain_fixed=_GPT2_FIXED,
        hf_fixed={"auto_map": auto_map},
        hf_ignored=_GPT2_IGNORED
        | {*_MUP_FROM_HF, "mup_scale_qk_dot_by_d", "alibi_scaling", "auto_map"},
        config_to_plugtrain=both(_widths_from_hf, _mup_from_hf),
        config_to_hf=both(_widths_to_hf, _mup_to_hf),
        plugtrain_handled=_GPT2_HANDLED | {*_MUP_KEYS, "pos_scaling_factor"},
        note=note,
    )


def _remote(repository: str, module: str, name: str) -> dict[str, str]:
    """``auto_map`` of a model whose code lives in a Hub repository (trust_remote_code)."""
    return {
        "AutoConfig": f"{repository}--configuration_{module}.{name}Config",
        "AutoModel": f"{repository}--modeling_{module}.{name}Model",
        "AutoModelForCausalLM": f"{repository}--modeling_{module}.{name}LMHeadModel",
    }


JAIS = _alibi_family(
    "jais",
    "jais",
    "JAISLMHeadModel",
    _remote("inceptionai/jais-30b-v3", "jais", "JAIS"),
    "JAIS (JAISLMHeadModel, remote code): ALiBi slopes as a tensor, SwiGLU gate in c_fc2, "
    "muP kept as mup_* config keys.",
)
JAIS_HEADLESS = headless_variant(JAIS, "JAISModel")
BTLM = _alibi_family(
    "btlm",
    "btlm",
    "BTLMLMHeadModel",
    _remote("cerebras/btlm-3b-8k-base", "btlm", "BTLM"),
    "BTLM (BTLMLMHeadModel, remote code): as JAIS.",
)
BTLM_HEADLESS = headless_variant(BTLM, "BTLMModel")
