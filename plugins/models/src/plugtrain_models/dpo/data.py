"""DpoHDF5DataProcessor: Model Zoo's DPO HDF5 reader (GptHDF5DataProcessor's, six rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plugtrain.schema import constructor_signature
from plugtrain_models.data.iterable_processor import gpt_hdf5_loader
from plugtrain_models.dpo.schemas import DPO_FEATURES, DpoProcessorArgs

__all__ = ["dpo_hdf5_loader"]


def dpo_hdf5_loader(*, features_list: Sequence[str] = DPO_FEATURES, **arguments: Any) -> Any:
    """Batches of ``chosen_*``/``rejected_*`` rows from ``data_dir``'s HDF5 files.

    Every argument is GptHDF5DataProcessor's (see
    :class:`~plugtrain_models.dpo.schemas.DpoProcessorArgs`).
    """
    return gpt_hdf5_loader(features_list=features_list, **arguments)


dpo_hdf5_loader.__signature__ = constructor_signature(DpoProcessorArgs)  # type: ignore[attr-defined]
