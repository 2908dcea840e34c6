"""What a checkpoint converter declares: a config table, weight rules and per-tensor transforms.

A converter is data on a shared engine (:mod:`plugtrain.conversion.engine`), not a script. It
maps one Hugging Face architecture to one plugtrain model in both directions:

- :class:`ConfigKey` rows rename ``config.json`` keys to the run file's ``model:`` keys;
  ``plugtrain_fixed`` holds the model keys the architecture implies (written on import, required
  on export), ``hf_fixed`` the ``config.json`` keys export writes, ``hf_required`` the values of
  ``config.json`` keys the model cannot express; ``config_to_plugtrain`` / ``config_to_hf``
  derive what a table cannot (grouped-query attention, rope scaling).
- :class:`WeightRule` rows map tensor names, written as templates (``layers.{layer}.norm1.weight``),
  with an optional :class:`Transform` for tensors that are not copied as they are (fused QKV,
  Conv1D transposes, the rotary row order).

This module is torch-free: listing converters imports it. Transforms import torch when they run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from plugtrain.errors import PlugtrainError

__all__ = [
    "FORMATS",
    "CheckpointConverter",
    "ConfigKey",
    "ConversionContext",
    "ConversionError",
    "ConverterArguments",
    "Transform",
    "WeightRule",
    "Wrapping",
    "headless",
]

FORMATS = ("hf", "plugtrain")
"""The checkpoint formats converters translate between: Hugging Face folders and plugtrain files."""

_MISSING = object()


@attrs.frozen
class ConverterArguments:
    """A converter takes no arguments: it is a declaration (register it with this schema)."""


class ConversionError(PlugtrainError, ValueError):
    """A checkpoint or config cannot be converted; the message names the key or tensor."""


@attrs.frozen
class ConversionContext:
    """What a transform may read: both configs of the model being converted.

    :param hf: the Hugging Face ``config.json`` (normalised: see ``hf_config``).
    :param keys: the run file's ``model:`` keys with every default filled in.
    """

    hf: Mapping[str, Any]
    keys: Mapping[str, Any]


@runtime_checkable
class Transform(Protocol):
    """Turns the tensors of one rule's Hugging Face names into those of its plugtrain names.

    Both methods take and return tensors in the order of the rule's names and must be exact
    inverses (a round trip gives back the same bits), keeping the dtype.
    """

    def to_plugtrain(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The plugtrain tensors made from the Hugging Face ones."""

    def to_hf(self, tensors: Sequence[Any], context: ConversionContext) -> list[Any]:
        """The Hugging Face tensors made from the plugtrain ones."""


def _strings(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _template_pattern(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    position = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[position : match.start()]))
        name = match.group(1)
        parts.append(rf"(?P<{name}>\d+)" if name in {"layer", "expert"} else rf"(?P<{name}>[^.]+)")
        position = match.end()
    parts.append(re.escape(template[position:]))
    return re.compile("".join(parts))


@attrs.frozen
class WeightRule:
    """Tensors named ``hf`` in a Hugging Face checkpoint are ``plugtrain`` in plugtrain's.

    Names are templates: ``{layer}`` and ``{expert}`` match numbers, any other ``{name}`` one
    dotted segment; the same placeholders appear on both sides. With no ``transform`` the rule maps
    one name to one name and copies the tensor.

    :param hf: the Hugging Face names, as the model with a head names them.
    :param plugtrain: plugtrain's names (without ``model.``); empty drops the Hugging Face tensors
        (buffers such as ``rotary_emb.inv_freq``).
    :param transform: builds one side's tensors from the other's.
    :param when: the rule applies only to models for which this is true (a layout chosen by a
        config key, such as one norm per block or two).
    """

    hf: tuple[str, ...] = attrs.field(converter=_strings)
    plugtrain: tuple[str, ...] = attrs.field(converter=_strings)
    transform: Transform | None = None
    when: Callable[[ConversionContext], bool] | None = None

    def __attrs_post_init__(self) -> None:
        if self.transform is None and self.plugtrain and len(self.hf) != len(self.plugtrain):
            message = (
                f"a rule without a transform maps names one to one: {self.hf} {self.plugtrain}"
            )
            raise ValueError(message)

    def patterns(self, side: str) -> list[re.Pattern[str]]:
        """The compiled templates of ``side`` (``"hf"`` or ``"plugtrain"``)."""
        return [_template_pattern(t) for t in getattr(self, side)]


@attrs.frozen
class ConfigKey:
    """A ``config.json`` key and the run file's ``model:`` key that holds the same value.

    :param hf: the ``config.json`` key.
    :param plugtrain: the ``model:`` key (dotted for a nested one: ``moe.num_experts``).
    :param default: the value transformers assumes when ``config.json`` lacks the key (the
        config class's default); without one the key is required.
    :param to_plugtrain: maps the value (identity when unset).
    :param to_hf: the inverse map.
    """

    hf: str
    plugtrain: str
    default: Any = _MISSING
    to_plugtrain: Callable[[Any], Any] | None = None
    to_hf: Callable[[Any], Any] | None = None

    @property
    def required(self) -> bool:
        """Whether ``config.json`` must have the key."""
        return self.default is _MISSING


def _config_keys(value: Iterable[ConfigKey]) -> tuple[ConfigKey, ...]:
    return tuple(value)


def _weight_rules(value: Iterable[WeightRule]) -> tuple[WeightRule, ...]:
    return tuple(value)


ConfigHook = Callable[[Mapping[str, Any], dict[str, Any]], None]
"""Derives keys the table cannot: reads one config, adds to the other (raises ConversionError)."""

MupFold = Callable[[dict[str, Any], dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]
"""``(state, keys) -> (state, keys)`` with muP's scales folded into the weights."""


@attrs.frozen
class Wrapping:
    """A model that holds a decoder of any family in one section (DPO's ``policy_model``).

    The converter of such a model has no table of its own: it takes the decoder family's
    converter, the one reading ``config.json``'s ``model_type`` on import and the one the
    section's ``name`` gives on export, and applies it under the section's prefix.

    :param section: the ``model:`` key holding the decoder's keys, and the prefix of its
        tensors in the model's state (``policy_model`` -> ``policy_model.model.…``).
    :param copies: the prefixes of copies of the decoder import fills with the same tensors
        (``ref_model``); export writes the section's tensors only.
    :param fixed: the model's other keys import writes beside the section (a required
        section of its own parameters, left to their defaults: ``{"dpo": {}}``).
    """

    section: str
    copies: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    fixed: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class CheckpointConverter:
    """One Hugging Face architecture as one plugtrain model, both ways (see the module).

    :param model: the plugtrain model the converted keys are for (``"llama"``).
    :param hf_model_types: ``config.json``'s ``model_type`` values accepted; the first is written.
    :param hf_architecture: ``config.json``'s ``architectures`` entry written on export.
    :param hf_prefix: the prefix the model with a head puts before the base model's names
        (``"model."`` for Llama, ``"transformer."`` for GPT-2); the headless variant drops it.
    :param config: the config table.
    :param weights: the weight rules; the first rule a name matches wins.
    :param plugtrain_fixed: model keys the architecture implies (import writes them; export
        refuses a model whose keys differ).
    :param hf_fixed: ``config.json`` keys export writes as they are.
    :param hf_required: ``config.json`` keys whose value the model needs (another value is an
        error naming the key: the forward would differ).
    :param hf_ignored: ``config.json`` keys known to have no effect on the weights or forward;
        other keys the table does not know are listed once as dropped.
    :param config_to_plugtrain: derives model keys from ``config.json``.
    :param config_to_hf: derives ``config.json`` keys from the model keys.
    :param lm_head: the plugtrain name of the output projection and the names of the embedding
        it is tied to (``share_embedding_weights``), for ties and headless variants.
    :param is_headless: a Hugging Face base model (no head): import creates ``lm_head`` (the
        embedding when tied, else N(0, 0.02)), export drops it.
    :param plugtrain_handled: model keys ``config_to_hf`` expresses (any other key set away
        from its default is refused on export: the Hugging Face model would compute another
        function).
    :param fold_mup: folds muP's scales into the weights and keys before export (standard
        parametrisation), returning both.
    :param detected: found from ``config.json``'s ``model_type`` when no key is given (``False``
        for a second converter of an architecture another converter already claims).
    :param note: one line shown by ``list-converters``.
    :param hf_parts: a Hugging Face folder of sub-models: each sub-folder's name and the
        ``architectures`` entry of its ``config.json``. Their tensors are named
        ``<sub-folder>.…`` (DPR's ``question_encoder.…`` and ``ctx_encoder.…``); import reads
        every sub-folder, export writes each sub-folder with its own tensors and config.
    :param wraps: the model holds a decoder of any family in one section (see :class:`Wrapping`);
        the tables of this declaration are then empty.
    """

    model: str
    hf_model_types: tuple[str, ...] = attrs.field(converter=_strings)
    hf_architecture: str
    hf_prefix: str
    config: tuple[ConfigKey, ...] = attrs.field(converter=_config_keys)
    weights: tuple[WeightRule, ...] = attrs.field(converter=_weight_rules)
    plugtrain_fixed: Mapping[str, Any] = attrs.field(factory=dict)
    hf_fixed: Mapping[str, Any] = attrs.field(factory=dict)
    hf_required: Mapping[str, Any] = attrs.field(factory=dict)
    hf_ignored: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)
    config_to_plugtrain: ConfigHook | None = None
    config_to_hf: ConfigHook | None = None
    lm_head: tuple[str, str] = ("lm_head.weight", "embedding_layer.word_embeddings.weight")
    plugtrain_handled: frozenset[str] = attrs.field(factory=frozenset, converter=frozenset)
    is_headless: bool = False
    fold_mup: MupFold | None = None
    detected: bool = True
    formats: tuple[str, str] = FORMATS
    note: str = ""
    hf_parts: Mapping[str, str] = attrs.field(factory=dict)
    wraps: Wrapping | None = None

    @property
    def folds_mup(self) -> bool:
        """Whether export folds muP into standard parametrisation."""
        return self.fold_mup is not None

    @property
    def hf_model_type(self) -> str:
        """The ``model_type`` export writes."""
        return self.hf_model_types[0]


def headless(converter: CheckpointConverter, architecture: str) -> CheckpointConverter:
    """The converter of the same model's Hugging Face base class (no head, no prefix)."""
    head, prefix = converter.lm_head[0], converter.hf_prefix

    def unprefixed(name: str) -> str:
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    rules = tuple(
        attrs.evolve(rule, hf=tuple(unprefixed(n) for n in rule.hf))
        for rule in converter.weights
        if head not in rule.plugtrain and not any(n.startswith("lm_head") for n in rule.hf)
    )
    return attrs.evolve(
        converter,
        hf_architecture=architecture,
        hf_prefix="",
        weights=rules,
        is_headless=True,
        note=f"{converter.note} Base model (no head): import makes lm_head, export drops it.",
    )


def missing() -> Any:
    """The marker of a :class:`ConfigKey` without a default (for introspection)."""
    return _MISSING
