"""The hook implementations of the GPT HDF5 data (no torch or h5py import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from plugtrain import hookimpl
from plugtrain_models.data import schemas

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar

DATALOADERS = {
    "GptHDF5MapDataProcessor": ("map_processor:gpt_hdf5_map_loader", schemas.MapProcessorArgs),
    "GptHDF5DataProcessor": ("iterable_processor:gpt_hdf5_loader", schemas.IterableProcessorArgs),
}


@hookimpl
def plugtrain_register_dataloaders(registry: ComponentRegistrar) -> None:
    """Register Model Zoo's two GPT HDF5 data processors."""
    for name, (target, schema) in DATALOADERS.items():
        registry.register(name, f"plugtrain_models.data.{target}", schema=schema)
