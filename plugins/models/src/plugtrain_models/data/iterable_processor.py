"""GptHDF5DataProcessor: Model Zoo's streaming reader of GPT HDF5 files (spec 4.3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.data.h5files import H5Files, list_h5_files, read_features
from plugtrain_models.data.loader import Batch, H5Batches, make_loader
from plugtrain_models.data.order import IterableOrder
from plugtrain_models.data.schemas import FEATURES, VSL_FEATURES, data_dirs

__all__ = ["gpt_hdf5_loader"]


def _features(data_dir: str | list[str], written: list[str], use_vsl: bool) -> list[str]:
    """Model Zoo's precedence: VSL's names, else data_params.json's of one folder, else written."""
    if use_vsl:
        return [*FEATURES, *VSL_FEATURES]
    from_params = read_features(data_dir) if isinstance(data_dir, str) else None
    return from_params or list(written)


def gpt_hdf5_loader(
    *,
    data_dir: str | list[str],
    batch_size: int,
    shuffle: bool,
    shuffle_seed: int | None = None,
    shuffle_buffer: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
    use_vsl: bool = False,
    features_list: Sequence[str] = FEATURES,
) -> DataLoader[Batch]:
    """The batches of the files in ``data_dir``; the schema documents every argument."""
    folders = data_dirs(data_dir)
    files = H5Files(list_h5_files(folders), need_count_attribute=True)
    if files.corpus:
        message = f"{files.paths[0]}: GptHDF5DataProcessor reads sample files, not a corpus"
        raise TrainingError(message)
    dataset = H5Batches(files, _features(data_dir, list(features_list), use_vsl))
    seed = shuffle_seed if shuffle_seed is not None else 0
    starts = [int(s) for s in files.starts]

    def order(rank: int, world_size: int) -> Any:
        if batch_size % world_size:
            message = (
                f"batch_size {batch_size} is the global batch: it must divide evenly over the "
                f"{world_size} processes"
            )
            raise TrainingError(message)
        if len(files.paths) < world_size:
            message = f"{len(files.paths)} files cannot be shared by {world_size} processes"
            raise TrainingError(message)
        per_rank = batch_size // world_size
        return IterableOrder(
            starts,
            per_rank,
            rank=rank,
            world_size=world_size,
            shuffle=shuffle,
            seed=seed,
            buffer_size=shuffle_buffer or 10 * batch_size,
            readers=max(1, num_workers),
            workers=num_workers > 0,
            drop_last=drop_last,
        )

    return make_loader(
        dataset,
        order,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
