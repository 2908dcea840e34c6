"""``config.json`` to a run file's ``model:`` keys and back, by a converter's table (torch-free)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from plugtrain.conversion.declaration import CheckpointConverter, ConversionError

__all__ = [
    "GENERIC_HF_KEYS",
    "NO_EFFECT_MODEL_KEYS",
    "disagreements",
    "get_key",
    "hf_to_plugtrain_config",
    "normalise_hf_config",
    "plugtrain_to_hf_config",
    "read_hf_config",
    "set_key",
]

GENERIC_HF_KEYS = frozenset({
    "_name_or_path", "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "use_cache", "output_attentions", "output_hidden_states", "return_dict", "is_decoder",
    "id2label", "label2id", "task_specific_params", "problem_type", "tokenizer_class",
    "torchscript", "chunk_size_feed_forward", "pruned_heads", "add_cross_attention",
    "is_encoder_decoder", "tie_encoder_decoder", "cross_attention_hidden_size",
    "finetuning_task", "prefix", "max_length", "min_length", "do_sample", "num_beams",
    "temperature", "top_k", "top_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "early_stopping", "typical_p", "diversity_penalty",
    "num_beam_groups", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "encoder_no_repeat_ngram_size", "output_scores", "return_dict_in_generate",
    "tf_legacy_loss", "use_bfloat16", "attn_implementation", "_attn_implementation_autoset",
    "pretraining_tp", "mlp_bias_initializer", "quantization_config", "gradient_checkpointing",
})  # fmt: skip
"""``config.json`` keys that say nothing about the weights or the forward of any decoder."""

NO_EFFECT_MODEL_KEYS = frozenset({
    "initializer_range", "initializer", "embedding_initializer", "output_layer_initializer",
    "attention_initializer", "ffn_initializer", "ffn_output_layer_initializer",
    "lm_head_initializer", "dropout_rate", "attention_dropout_rate", "embedding_dropout_rate",
    "residual_dropout_rate", "loss_scaling", "loss_weight", "label_smoothing", "fp16_type",
    "mixed_precision", "boundary_casting", "start_token", "stop_sequences", "loop_dim",
    "max_tokens", "temperature", "top_k", "top_p", "use_ff_layer1_dropout", "z_loss_coeff",
    "use_vsl", "lora_params", "compute_eval_metrics", "use_bfloat16", "dtype",
    "lr_adjustment_groups", "attention_kernel", "attention_softmax_fp32", "fold_rope_consts",
    "use_experimental_flex_api",
})  # fmt: skip
"""``model:`` keys that change how a model trains, not the function its weights compute."""


def read_hf_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``config.json`` at ``path`` (a file or the folder that holds it), normalised."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConversionError(f"{file}: cannot read the Hugging Face config: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        message = f"{file}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"
        raise ConversionError(message) from exc
    if not isinstance(data, dict):
        raise ConversionError(f"{file}: a Hugging Face config is a JSON object")
    return normalise_hf_config(data)


def normalise_hf_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with transformers 5's spellings read into transformers 4's.

    transformers 5 writes ``rope_parameters`` (``rope_type``, ``rope_theta``, scaling keys,
    ``partial_rotary_factor``) where transformers 4 wrote ``rope_theta`` and ``rope_scaling``
    (GPT-NeoX: ``rotary_emb_base`` and ``rotary_pct``); converters read the latter.
    """
    hf = copy.deepcopy(dict(config))
    parameters = hf.pop("rope_parameters", None)
    if isinstance(parameters, Mapping):
        nested = parameters.get("full_attention") if "full_attention" in parameters else None
        parameters = dict(nested if isinstance(nested, Mapping) else parameters)
        if "rope_theta" in parameters:
            hf["rope_theta"] = parameters.pop("rope_theta")
        if "partial_rotary_factor" in parameters:
            hf["partial_rotary_factor"] = parameters.pop("partial_rotary_factor")
        kind = parameters.get("rope_type", parameters.get("type", "default"))
        hf["rope_scaling"] = None if kind == "default" else parameters
    if "rotary_emb_base" in hf:
        hf.setdefault("rope_theta", hf.pop("rotary_emb_base"))
    if "rotary_pct" in hf:
        hf.setdefault("partial_rotary_factor", hf.pop("rotary_pct"))
    scaling = hf.get("rope_scaling")
    if isinstance(scaling, Mapping):
        scaling = dict(scaling)
        if "type" in scaling and "rope_type" not in scaling:
            scaling["rope_type"] = scaling.pop("type")
        if scaling.get("rope_type") == "default":
            scaling = None
        hf["rope_scaling"] = scaling
    return hf


def get_key(keys: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``keys[a][b]`` for ``"a.b"`` (``default`` where a level is absent or null)."""
    value: Any = keys
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or value.get(part) is None:
            return default
        value = value[part]
    return value


def set_key(keys: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``keys[a][b] = value`` for ``"a.b"``, creating the mappings on the way."""
    *parents, last = dotted.split(".")
    level = keys
    for part in parents:
        child = level.get(part)
        if not isinstance(child, dict):
            child = level[part] = dict(child) if isinstance(child, Mapping) else {}
        level = child
    level[last] = value


def hf_to_plugtrain_config(
    converter: CheckpointConverter, hf: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The ``model:`` keys of a Hugging Face config, and the ``config.json`` keys dropped.

    :raises ConversionError: another architecture, a required key missing, or a value the model
        cannot express (naming the key).
    """
    model_type = hf.get("model_type")
    if model_type is not None and model_type not in converter.hf_model_types:
        expected = " or ".join(repr(t) for t in converter.hf_model_types)
        message = (
            f"config.json: model_type is {model_type!r}, but the {converter.model!r} converter "
            f"reads {expected}; pass the converter of that architecture"
        )
        raise ConversionError(message)
    for key, value in converter.hf_required.items():
        if key in hf and hf[key] != value:
            message = (
                f"config.json: {key} = {hf[key]!r} is not supported by plugtrain's "
                f"{converter.model!r} model (it needs {value!r}; the forward would differ)"
            )
            raise ConversionError(message)
    keys: dict[str, Any] = {}
    for row in converter.config:
        if row.hf in hf:
            value = hf[row.hf]
        elif row.required:
            raise ConversionError(f"config.json: {row.hf!r} is missing")
        else:
            value = row.default
        set_key(keys, row.plugtrain, row.to_plugtrain(value) if row.to_plugtrain else value)
    for dotted, value in converter.plugtrain_fixed.items():
        set_key(keys, dotted, copy.deepcopy(value))
    if converter.config_to_plugtrain is not None:
        converter.config_to_plugtrain(hf, keys)
    known = {row.hf for row in converter.config} | set(converter.hf_required)
    known |= converter.hf_ignored | GENERIC_HF_KEYS
    dropped = sorted(k for k in hf if k not in known)
    return keys, dropped


def plugtrain_to_hf_config(
    converter: CheckpointConverter,
    keys: Mapping[str, Any],
    defaults: Mapping[str, Any],
    handled: Iterable[str] = (),
) -> dict[str, Any]:
    """The ``config.json`` of a model with complete ``model:`` ``keys``.

    :param defaults: every model key's default, to tell a key the user set from one left alone.
    :param handled: model keys the converter's hooks express (besides its table).
    :raises ConversionError: a key the architecture implies has another value, or a key set to
        something the Hugging Face architecture cannot express (naming the key).
    """
    for dotted, value in converter.plugtrain_fixed.items():
        actual = get_key(keys, dotted)
        if actual != value and dotted not in NO_EFFECT_MODEL_KEYS:
            message = (
                f"model.{dotted} is {actual!r}, but Hugging Face {converter.hf_architecture} "
                f"needs {value!r}"
            )
            raise ConversionError(message)
    hf: dict[str, Any] = {"architectures": [converter.hf_architecture]}
    hf["model_type"] = converter.hf_model_type
    covered = {row.plugtrain.split(".")[0] for row in converter.config}
    covered |= {k.split(".")[0] for k in converter.plugtrain_fixed} | set(handled)
    for row in converter.config:
        value = get_key(keys, row.plugtrain)
        hf[row.hf] = row.to_hf(value) if row.to_hf else value
    hf.update(copy.deepcopy(dict(converter.hf_fixed)))
    if converter.config_to_hf is not None:
        converter.config_to_hf(keys, hf)
    for key, value in keys.items():
        if key in covered or key in NO_EFFECT_MODEL_KEYS or key == "name":
            continue
        if key in defaults and value != defaults[key]:
            message = (
                f"model.{key} = {value!r} has no equivalent in Hugging Face "
                f"{converter.hf_architecture} (only its default {defaults[key]!r} converts)"
            )
            raise ConversionError(message)
    return hf


def disagreements(
    expected: Mapping[str, Any], actual: Mapping[str, Any], prefix: str = ""
) -> list[tuple[str, Any, Any]]:
    """``(dotted key, expected, actual)`` for each key of ``expected`` that ``actual`` differs on.

    Keys that do not change the weights' function (:data:`NO_EFFECT_MODEL_KEYS`) are skipped.
    """
    found: list[tuple[str, Any, Any]] = []
    for key, value in expected.items():
        if key in NO_EFFECT_MODEL_KEYS or key == "name":
            continue
        other = actual.get(key)
        if isinstance(value, Mapping) and isinstance(other, Mapping):
            found.extend(disagreements(value, other, f"{prefix}{key}."))
        elif not _same(value, other):
            found.append((f"{prefix}{key}", value, other))
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (a == b and type(a) is type(b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)
