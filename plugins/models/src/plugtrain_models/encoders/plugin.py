"""The hook implementations of the ``encoders`` plugin of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's text encoders and encoder-decoders under their Model Zoo names."""


@hookimpl
def plugtrain_register_checkpoint_converters(registry: ComponentRegistrar) -> None:
    """Register the Hugging Face converters of the encoder families under Model Zoo's keys."""
