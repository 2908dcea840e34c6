"""DPRHDF5DataProcessor: questions and their contexts, streamed from HDF5 files in order."""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.data.h5files import list_h5_files
from plugtrain_models.data.order import IterableOrder
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.order import rank_rows
from plugtrain_models.encoder_data.paths import resolved
from plugtrain_models.encoder_data.schemas_text import DPR_FEATURES

__all__ = ["DPRFiles", "dpr_features", "dpr_loader"]

GROUPS = ("data_0", "data_1")


def dpr_features(folder: str, written: list[Any]) -> list[list[str]]:
    """The row names of ``data_0`` and ``data_1``: ``data_params.json``'s, else ``written``."""
    path = os.path.join(folder, "data_params.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as file:
            params = json.load(file)
        if all(f"{group}_features" in params for group in GROUPS):
            return [list(params[f"{group}_features"]) for group in GROUPS]
    if len(written) != 2 or not all(isinstance(names, list) for names in written):
        return [list(names) for names in DPR_FEATURES]
    return [list(names) for names in written]


class DPRFiles:
    """The ``data_0`` / ``data_1`` samples of several HDF5 files, by global index."""

    def __init__(self, paths: list[str], features: list[list[str]]) -> None:
        self.paths, self.features = paths, features
        counts = []
        for path in paths:
            with h5py.File(path, "r") as file:
                for group, rank in zip(GROUPS, (3, 4), strict=True):
                    if group not in file or file[group].ndim != rank:
                        message = f"{path}: no dataset {group!r} of rank {rank}"
                        raise TrainingError(message)
                if "n_examples" not in file.attrs:
                    raise TrainingError(f"{path}: the file has no 'n_examples' attribute")
                count = int(file.attrs["n_examples"])
                if len(file["data_0"]) < count or len(file["data_1"]) < count:
                    raise TrainingError(f"{path}: n_examples {count} exceeds the data")
                counts.append(count)
        self.starts = np.cumsum([0, *counts])
        self._handles: dict[str, Any] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def sample(self, index: int) -> Sample:
        """Sample ``index``: each row of ``data_0`` and ``data_1`` under its feature name."""
        if self._pid != os.getpid():
            self._handles, self._pid = {}, os.getpid()
        file = int(np.searchsorted(self.starts, index, side="right")) - 1
        path = self.paths[file]
        handle = self._handles.get(path) or self._handles.setdefault(path, h5py.File(path, "r"))
        local = index - int(self.starts[file])
        sample: Sample = {}
        for group, names in zip(GROUPS, self.features, strict=True):
            rows = np.asarray(handle[group][local], dtype=np.int32)
            sample.update({name: rows[row] for row, name in enumerate(names)})
        return sample

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = {}
        return state


def _with_labels(context_key: str) -> Any:
    def finish(batch: Batch) -> Batch:
        rows, contexts = batch[context_key].shape[:2]
        batch["labels"] = torch.arange(rows) * contexts
        batch["context_labels"] = torch.arange(rows)
        return batch

    return finish


def dpr_loader(
    *,
    batch_size: int,
    data_dir: str | list[str],
    shuffle: bool = False,
    shuffle_seed: int | None = None,
    shuffle_buffer: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
    use_vsl: bool = False,
    features_list: list[Any] = DPR_FEATURES,
) -> DataLoader[Batch]:
    """The batches of the HDF5 files of ``data_dir``; the schema documents every argument."""
    folders = [
        resolved("data_dir", d) for d in ([data_dir] if isinstance(data_dir, str) else data_dir)
    ]
    features = dpr_features(folders[0], list(features_list))
    files = DPRFiles(list_h5_files(folders), features)
    starts = [int(s) for s in files.starts]

    def order(rank: int, world_size: int) -> IterableOrder:
        per_rank = rank_rows(batch_size, rank, world_size)
        if len(files.paths) < world_size:
            message = f"{len(files.paths)} files cannot be shared by {world_size} processes"
            raise TrainingError(message)
        return IterableOrder(
            starts, per_rank.stop - per_rank.start, rank=rank, world_size=world_size,
            shuffle=shuffle, seed=shuffle_seed or 0,
            buffer_size=shuffle_buffer or 10 * batch_size, readers=max(1, num_workers),
            workers=num_workers > 0, drop_last=drop_last,
        )  # fmt: skip

    dataset = SampleBatches(files.sample, finish=_with_labels(features[1][0]), count=len(files))
    return loader(
        dataset,
        order,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
