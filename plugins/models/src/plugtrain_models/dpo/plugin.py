"""The hook implementations of the ``dpo`` plugin of plugtrain-models (no torch import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_models(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's ``dpo`` (a policy decoder and its frozen reference)."""
    registry.register(
        "dpo", "plugtrain_models.dpo.model:dpo", schema="plugtrain_models.dpo.schemas:DpoArgs"
    )


@hookimpl
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's ``DpoHDF5DataProcessor``."""
    registry.register(
        "DpoHDF5DataProcessor",
        "plugtrain_models.dpo.data:dpo_hdf5_loader",
        schema="plugtrain_models.dpo.schemas:DpoProcessorArgs",
    )


@hookimpl
def plugtrain_register_checkpoint_converters(registry: ComponentRegistrar) -> None:
    """Register ``dpo``: a decoder family's Hugging Face folder as policy and reference."""
    from plugtrain.conversion.declaration import ConverterArguments

    registry.register(
        "dpo",
        "plugtrain_models.dpo.converter:DPO",
        schema=ConverterArguments,
        summary="Hugging Face <-> plugtrain checkpoints of dpo's policy decoder",
    )
