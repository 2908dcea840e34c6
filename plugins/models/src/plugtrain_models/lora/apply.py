"""Turning a built model into a LoRA model: wrap the targeted layers, freeze everything else.

Model Zoo's ``make_model_lora``: the module tree is walked from the root; each ``nn.Linear`` or
``nn.Embedding`` takes the first group whose targets it matches (:mod:`.targets`); groups with
``r: 0`` add nothing. Then every parameter not named ``*.lora_A`` / ``*.lora_B`` is frozen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from torch import nn

from plugtrain_models.lora.config import LoraConfig
from plugtrain_models.lora.layers import LoraEmbedding, LoraLinear, lora_layers
from plugtrain_models.lora.targets import choose, class_names

__all__ = ["Layer", "adaptable_layers", "apply_lora", "is_adapter"]

Layer = tuple[str, tuple[str, ...], nn.Module]
"""A layer's module name, its class-name path (root first, both spellings) and the module."""


def is_adapter(name: str) -> bool:
    """Whether the parameter ``name`` is a LoRA adapter (``*.lora_A`` or ``*.lora_B``)."""
    return name.endswith((".lora_A", ".lora_B")) or name in ("lora_A", "lora_B")


def _walk(module: nn.Module, name: str, path: tuple[str, ...]) -> Iterator[Layer]:
    path = (*path, *class_names(type(module).__name__))
    if isinstance(module, nn.Linear | nn.Embedding):
        yield name, path, module
        return
    for child_name, child in module.named_children():
        yield from _walk(child, f"{name}.{child_name}" if name else child_name, path)


def adaptable_layers(model: nn.Module) -> list[Layer]:
    """Every ``nn.Linear`` and ``nn.Embedding`` of ``model``, in module order."""
    return list(_walk(model, "", ()))


def _shape(module: nn.Module) -> tuple[int, int]:
    rows, columns = module.get_parameter("weight").shape
    return int(rows), int(columns)


def apply_lora(model: nn.Module, configs: Sequence[LoraConfig], seed: int = 0) -> dict[str, Any]:
    """Wrap the targeted layers of ``model`` in place and freeze every other parameter.

    :returns: ``{"layers": adapted module names, "trainable": adapter elements,
        "total": all elements, "model": the model}`` (a new one when ``model`` is itself a
        Linear or Embedding, which cannot be wrapped in place).
    :raises ValueError: no layer matches any group's targets (naming what exists), or ``r`` is
        larger than a target's smaller side.
    """
    layers = adaptable_layers(model)
    chosen = choose([(name, path, _shape(module)) for name, path, module in layers], configs)
    owners: dict[int, int] = {}
    for name, _, module in layers:
        config = chosen.get(name)
        if config is None or config.r == 0:
            continue
        wrapper: nn.Module
        if isinstance(module, nn.Linear):
            wrapper = LoraLinear(module, config, name, seed)
        elif isinstance(module, nn.Embedding):
            wrapper = LoraEmbedding(module, config, name, seed)
        else:
            continue
        if not name:  # the model is itself the layer: the wrapper is the model
            model = wrapper
        else:
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name), child, wrapper)
        owners[id(module.weight)] = owners.get(id(module.weight), 0) + 1
    for layer in lora_layers(model).values():
        if owners.get(id(layer.weight), 0) > 1:
            layer.merge = False  # a tied weight: merging one layer's update would change both
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(is_adapter(name))
    parameters = dict(model.named_parameters())
    trainable = sum(p.numel() for n, p in parameters.items() if is_adapter(n))
    total = sum(p.numel() for p in parameters.values())
    return {
        "layers": sorted(lora_layers(model)),
        "trainable": trainable,
        "total": total,
        "model": model,
    }
