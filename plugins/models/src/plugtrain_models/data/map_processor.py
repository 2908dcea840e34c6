"""GptHDF5MapDataProcessor: Model Zoo's map-style reader of GPT HDF5 files (spec 4.2)."""

from __future__ import annotations

import math
from typing import Any

from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.data.h5files import H5Files, list_h5_files
from plugtrain_models.data.loader import Batch, H5Batches, make_loader
from plugtrain_models.data.order import PAD, MapOrder
from plugtrain_models.data.schemas import FEATURES, VSL_FEATURES, data_dirs, parse_subset
from plugtrain_models.data.transforms import compose

__all__ = ["ShardedMapOrder", "gpt_hdf5_map_loader", "subset_indices"]


def subset_indices(count: int, subset: str | None) -> list[int]:
    """The sample indices that ``data_subset`` selects among ``count`` (all when ``None``)."""
    if subset is None:
        return list(range(count))
    chosen: list[int] = []
    for start, end in parse_subset(subset):
        chosen.extend(range(math.floor(count * start), math.floor(count * end)))
    return chosen


class ShardedMapOrder:
    """Rank r's rows [r·B/W, (r+1)·B/W) of every global batch of a :class:`MapOrder`.

    A short last batch (``drop_last: false``) is split by the same rows, its missing rows
    padded (loss mask 0), so that every rank takes the same number of steps.
    """

    def __init__(self, order: MapOrder, rank: int, world_size: int) -> None:
        if order.batch_size % world_size:
            message = (
                f"batch_size {order.batch_size} is the global batch: it must divide evenly "
                f"over the {world_size} processes"
            )
            raise TrainingError(message)
        self.order, self.world_size = order, world_size
        share = order.batch_size // world_size
        self.rows = slice(rank * share, (rank + 1) * share)

    def batches(self, epoch: int) -> Any:
        """The rank's rows of each global batch of ``epoch``."""
        for batch in self.order.batches(epoch):
            missing = self.order.batch_size - len(batch) if self.world_size > 1 else 0
            yield (batch + [PAD] * missing)[self.rows]

    def num_batches(self, epoch: int) -> int:
        """As many as the global order has."""
        return self.order.num_batches(epoch)


def gpt_hdf5_map_loader(
    *,
    batch_size: int,
    data_dir: str | list[str] | None = None,
    mixture: list[dict[str, Any]] | None = None,
    shuffle: bool = False,
    shuffle_seed: int = 0,
    max_sequence_length: int | None = None,
    data_subset: str | None = None,
    num_samples: int | None = None,
    drop_last: bool = True,
    pad_last: bool = False,
    sort_files: bool = True,
    use_vsl: bool = False,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    dataset_map_fn: Any = None,
    data_transforms: list[dict[str, Any]] | None = None,
) -> DataLoader[Batch]:
    """The batches of the files in ``data_dir``; the schema documents every argument."""
    if data_dir is None or mixture is not None or dataset_map_fn is not None:
        message = "GptHDF5MapDataProcessor takes data_dir (mixture, dataset_map_fn: not yet)"
        raise TrainingError(message)
    files = H5Files(
        list_h5_files(data_dirs(data_dir), sort=sort_files),
        max_sequence_length=max_sequence_length,
    )
    features = list(FEATURES) + (list(VSL_FEATURES) if use_vsl else [])
    if use_vsl and files.rows < len(features):
        message = f"use_vsl needs samples of 5 rows; {files.paths[0]} has {files.rows}"
        raise TrainingError(message)
    dataset = H5Batches(files, features, compose(data_transforms))
    indices = subset_indices(len(files), data_subset)
    if not indices:
        raise TrainingError(f"no samples in {data_dir} (data_subset {data_subset!r})")
    order = MapOrder(
        indices,
        batch_size,
        shuffle=shuffle,
        shuffle_seed=shuffle_seed,
        num_samples=num_samples,
        drop_last=drop_last,
        pad_last=pad_last,
    )
    return make_loader(
        dataset,
        lambda rank, world: ShardedMapOrder(order, rank, world),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        advance_each_pass=True,
    )
