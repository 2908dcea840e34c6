"""Running a LoRA model as its base: the adapters switched off for a while.

DPO's reference with a ``Lora`` callback is the policy without its adapters: the same base
weights, so that one copy of them is held (as PEFT's ``disable_adapter``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from plugtrain_models.lora.layers import lora_layers

__all__ = ["adapters_disabled"]


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Within the block, every LoRA layer of ``model`` computes its base layer alone.

    A layer whose update is merged into its weight (``eval()`` with ``merge_weights``) is
    unmerged for the block; ``eval()`` within the block merges nothing, so that no updated copy
    of a weight is made; after the block each layer is merged as its mode says.
    """
    layers = list(lora_layers(model).values())
    for layer in layers:
        layer._set_merged(False)
        layer.adapters_off = True
    try:
        yield
    finally:
        for layer in layers:
            layer.adapters_off = False
            layer._set_merged(not layer.training)  # as its mode says, as train() leaves it
