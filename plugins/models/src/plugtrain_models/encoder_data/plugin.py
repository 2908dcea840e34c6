"""The hook implementations of the ``encoder_data`` plugin of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's data processors of the text encoders and encoder-decoders."""
