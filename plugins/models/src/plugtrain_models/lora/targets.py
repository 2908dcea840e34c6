"""Which layers a LoRA group adapts: Model Zoo's class-name paths, plus module-name globs.

Torch-free, so ``plugtrain check`` can use it. Model Zoo walks the module tree from the root and
records each module's class name; an ``nn.Linear`` or ``nn.Embedding`` is adapted when *every*
entry of ``target_modules`` appears in that path (``["MultiQueryAttention", "Linear"]``: the
attention projections). plugtrain's decoder names its classes differently, so each module's
path holds both spellings (:data:`MODELZOO_CLASS_NAMES`). An entry may also be a module-name
glob, matched as parameter tags match names: against the whole dotted name or any dot-suffix
of it (``*.proj_q_dense_layer``, ``lm_head``), or one of PEFT's module names
(:data:`PEFT_MODULE_NAMES`: ``q_proj``, ``c_attn``, ...). A list of PEFT names alone is read as
PEFT reads it: a layer matching any of them is a target.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plugtrain_models.lora.config import LoraConfig

__all__ = [
    "ADAPTABLE_CLASSES",
    "MODELZOO_CLASS_NAMES",
    "PEFT_MODULE_NAMES",
    "LayerInfo",
    "choose",
    "class_names",
    "describe_layers",
    "name_matches",
    "targeted",
]

LayerInfo = tuple[str, tuple[str, ...], tuple[int, int]]
"""A layer's module name, class-name path (root first, both spellings) and weight shape."""

ADAPTABLE_CLASSES = ("Linear", "Embedding")
"""The layers LoRA wraps (``torch.nn.Linear``, ``torch.nn.Embedding``), as Model Zoo's."""

MODELZOO_CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "Attention": ("MultiheadAttention", "MultiQueryAttention"),
    "FeedForward": ("FeedForwardNetwork",),
    "MixtureOfExperts": ("FeedForwardNetwork",),
    "FFNLayer": ("SingleFeedForwardLayer",),
    "DecoderLayer": ("TransformerDecoderLayer",),
    "EmbeddingLayer": ("EmbeddingLayer",),
    "LanguageModel": ("GPT2LMHeadModel",),
}
"""Model Zoo's class names of plugtrain's decoder classes. An attention layer answers to both
of Model Zoo's names (a decoder has one kind, so either selects its projections)."""


PEFT_MODULE_NAMES: dict[str, tuple[str, ...]] = {
    "q_proj": ("proj_q_dense_layer",),
    "k_proj": ("proj_k_dense_layer",),
    "v_proj": ("proj_v_dense_layer",),
    "o_proj": ("proj_output_dense_layer",),
    "gate_proj": ("ffn.0.linear_layer_for_glu",),
    "up_proj": ("ffn.0.linear_layer",),
    "down_proj": ("ffn.1.linear_layer",),
    "embed_tokens": ("embedding_layer.word_embeddings",),
    "c_attn": ("proj_q_dense_layer", "proj_k_dense_layer", "proj_v_dense_layer"),
    "c_fc": ("ffn.0.linear_layer",),
    "c_proj": ("proj_output_dense_layer", "ffn.1.linear_layer"),
}
"""PEFT's (Hugging Face's) module names of the Llama- and GPT-2-style families, as module-name
globs of plugtrain's decoder (the converters' weight rules)."""


def class_names(own: str) -> tuple[str, ...]:
    """The names a module of class ``own`` answers to in a class-name path."""
    return (own, *MODELZOO_CLASS_NAMES.get(own, ()))


def name_matches(pattern: str, name: str) -> bool:
    """Whether ``pattern`` matches ``name`` or one of its dot-suffixes (parameter tags' rule)."""
    parts = name.split(".")
    return any(fnmatch.fnmatchcase(".".join(parts[i:]), pattern) for i in range(len(parts)))


def targeted(target_modules: Sequence[str] | None, name: str, path: Iterable[str]) -> bool:
    """Whether the layer ``name`` with class-name ``path`` (root first) is a target.

    :param target_modules: ``None``: every Linear and Embedding (Model Zoo's default); else
        every entry must be a class name in ``path`` or a glob matching ``name`` (a list of
        PEFT module names alone: any of them).
    """
    if target_modules is None:
        return True
    names = set(path)

    def hit(entry: str) -> bool:
        aliases = PEFT_MODULE_NAMES.get(entry, ())
        return entry in names or any(name_matches(p, name) for p in (entry, *aliases))

    if all(entry in PEFT_MODULE_NAMES for entry in target_modules):
        return any(hit(entry) for entry in target_modules)
    return all(hit(entry) for entry in target_modules)


def describe_layers(layers: Sequence[LayerInfo]) -> str:
    """The class names and module names there are, for an error saying nothing matched."""
    classes = sorted({entry for _, path, _ in layers for entry in path})
    pattern = r"(layers|experts)\.\d+\."
    names = dict.fromkeys(re.sub(pattern, r"\1.<n>.", name) for name, _, _ in layers)
    return f"class names: {', '.join(classes)}; module names: {', '.join(names)}"


def choose(layers: Sequence[LayerInfo], configs: Sequence[LoraConfig]) -> dict[str, LoraConfig]:
    """The group each layer takes (the first it matches), by module name.

    :raises ValueError: no layer matches any group (naming the class and module names there
        are), or a group's ``r`` is larger than a target's smaller side.
    """
    chosen: dict[str, LoraConfig] = {}
    for name, path, shape in layers:
        config = next((c for c in configs if targeted(c.target_modules, name, path)), None)
        if config is None:
            continue
        if config.r > min(shape):
            sides = "x".join(map(str, shape))
            message = f"LoRA r={config.r} is larger than the smaller side of {name} ({sides})"
            raise ValueError(message)
        chosen[name] = config
    if not chosen:
        targets = [list(c.target_modules or ()) for c in configs]
        message = (
            f"LoRA target_modules {targets} match no Linear or Embedding layer (a layer must "
            "match every entry of a list, as in Model Zoo: for either of two layers give two "
            "groups, or one glob such as '*.proj_[qv]_dense_layer'); "
        )
        raise ValueError(message + describe_layers(layers))
    return chosen
