"""Preparing a built model before the strategy wraps it: activation checkpointing, then compile.

Both act on the model's repeated blocks (a decoder's layers): a model declares them with an
optional ``repeated_blocks()`` method (or a ``repeated_blocks`` attribute holding the modules;
since plugin API 1.1); without one, the items of every ``nn.ModuleList`` of at least two
modules of one class are the blocks (torchtitan's ``model.layers``).

- ``activation_checkpointing: full`` recomputes each block's forward pass in the backward pass
  (``torch.utils.checkpoint``, ``use_reentrant=False``); ``selective`` saves the outputs of the
  matrix multiplications and attention and recomputes the rest (an op policy through
  ``create_selective_checkpoint_contexts``, as torchtitan's op-level selective checkpointing).
- ``compile: regional`` compiles each block (``nn.Module.compile``: blocks of one shape share
  the compiled code, so it compiles about once per distinct block); ``full`` the whole model.

Both change the module in place and keep its parameter names, so checkpoints are unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from plugtrain.config.speed import ACTIVATION_CHECKPOINTING, COMPILE
from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["prepare_model", "repeated_blocks", "saved_by_selective_checkpointing"]


def _ops(*names: str) -> frozenset[Any]:
    found = []
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        if packet is not None:
            found.append(packet.default)
    return frozenset(found)


saved_by_selective_checkpointing = _ops(
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_mm",
)
"""The ops whose outputs selective checkpointing keeps (torchtitan's list)."""


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: its declaration, else its ModuleLists of one class."""
    declared = getattr(model, "repeated_blocks", None)
    if callable(declared):
        return list(declared())
    if declared is not None:
        return list(declared)
    blocks: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len({type(item) for item in module}) == 1:
            blocks.extend(module if len(module) >= 2 else [])
    return blocks


def _selective_policy(_context: Any, op: Any, *_args: Any, **_kwargs: Any) -> CheckpointPolicy:
    if op in saved_by_selective_checkpointing:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _checkpointed(block: nn.Module, selective: bool) -> None:
    """Make ``block``'s forward pass recomputed in the backward pass (in place)."""
    forward = block.forward
    # Full checkpointing passes no context_fn: torch.compile (regional) traces checkpoint only
    # with its default one or a selective policy, not another function it cannot see into.
    options: dict[str, Any] = {"use_reentrant": False}
    if selective:
        options["context_fn"] = functools.partial(
            create_selective_checkpoint_contexts, _selective_policy
        )

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(forward, *args, **options, **kwargs)

    block.forward = run


def _blocks(model: nn.Module, option: str, value: str) -> list[nn.Module]:
    blocks = repeated_blocks(model)
    if not blocks:
        message = (
            f"{value} needs the model's repeated blocks, and "
            f"{type(model).__name__} declares none (a repeated_blocks() method) and has no "
            "nn.ModuleList of two or more modules of one class"
        )
        raise ConfigError([ConfigIssue(option, message)])
    return blocks


def prepare_model(
    model: nn.Module,
    *,
    compile: str = "off",  # noqa: A002 - the run file's key (torchtitan's spelling)
    activation_checkpointing: str = "off",
) -> nn.Module:
    """``model`` with activation checkpointing, then compilation, as asked (in place).

    :param compile: ``off``, ``regional`` (each repeated block) or ``full`` (the model).
    :param activation_checkpointing: ``off``, ``full`` (per block) or ``selective`` (per block,
        keeping the matmuls' and attention's outputs).
    :raises ConfigError: an unknown value, or blocks asked of a model without any.
    """
    for option, value, allowed in (
        ("compile", compile, COMPILE),
        ("activation_checkpointing", activation_checkpointing, ACTIVATION_CHECKPOINTING),
    ):
        if value not in allowed:
            message = f"must be one of {', '.join(allowed)}, got {value!r}"
            raise ConfigError([ConfigIssue(option, message)])
    if activation_checkpointing != "off":
        for block in _blocks(model, "activation_checkpointing", activation_checkpointing):
            _checkpointed(block, selective=activation_checkpointing == "selective")
    if compile == "regional":
        for block in _blocks(model, "compile", compile):
            block.compile()
    elif compile == "full":
        model.compile()
    return model
