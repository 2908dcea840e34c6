"""BertHDF5DataProcessor: BERT's masked HDF5 samples, read by index as the GPT map loader."""

from __future__ import annotations

import json
import os
from typing import Any

import h5py
import numpy as np
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.data.h5files import list_h5_files
from plugtrain_models.data.map_processor import ShardedMapOrder, subset_indices
from plugtrain_models.data.order import PAD, MapOrder
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.paths import resolved

__all__ = ["BertHDF5Files", "bert_hdf5_loader", "label_features"]


def label_features(folder: str) -> list[str]:
    """The rows of ``labels``: gathered MLM labels when ``data_params.json`` says so."""
    path = os.path.join(folder, "data_params.json")
    dataset: dict[str, Any] = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as file:
            dataset = json.load(file).get("dataset") or {}
    mlm = dataset.get("training_objective") == "mlm"
    if mlm and dataset.get("mlm_with_gather", False):
        return ["labels", "masked_lm_positions", "masked_lm_mask"]
    return ["labels"]


class BertHDF5Files:
    """The ``data`` and ``labels`` of several HDF5 files as one array of samples."""

    def __init__(self, paths: list[str], data_rows: list[str], label_rows: list[str]) -> None:
        self.paths, self.data_rows, self.label_rows = paths, data_rows, label_rows
        counts, shapes = [], None
        for path in paths:
            with h5py.File(path, "r") as file:
                for name, rows in (("data", data_rows), ("labels", label_rows)):
                    if name not in file or file[name].ndim != 3:
                        message = f"{path}: no dataset {name!r} of rank 3 ([N, rows, length])"
                        raise TrainingError(message)
                    if file[name].shape[1] < len(rows):
                        message = (
                            f"{path}: {name} has {file[name].shape[1]} rows, fewer than "
                            f"{', '.join(rows)}"
                        )
                        raise TrainingError(message)
                if len(file["labels"]) != len(file["data"]):
                    counts = len(file["data"]), len(file["labels"])
                    message = f"{path}: data has {counts[0]} samples, labels {counts[1]}"
                    raise TrainingError(message)
                found = (file["data"].shape[2], file["labels"].shape[2])
                if shapes is not None and found != shapes:
                    message = f"{path}: lengths {found} differ from {paths[0]}'s {shapes}"
                    raise TrainingError(message)
                shapes = found
                counts.append(len(file["data"]))
        self.shapes = shapes or (0, 0)
        self.starts = np.cumsum([0, *counts])
        self._handles: dict[str, Any] = {}
        self._pid = os.getpid()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _file(self, path: str) -> Any:
        if self._pid != os.getpid():  # a forked worker opens its own handles
            self._handles, self._pid = {}, os.getpid()
        if path not in self._handles:
            self._handles[path] = h5py.File(path, "r")
        return self._handles[path]

    def sample(self, index: int) -> Sample:
        """Sample ``index`` as its named features (zeros for a padding row)."""
        if index == PAD:
            data = np.zeros((len(self.data_rows), self.shapes[0]), dtype=np.int32)
            labels = np.zeros((len(self.label_rows), self.shapes[1]), dtype=np.int32)
        else:
            file = int(np.searchsorted(self.starts, index, side="right")) - 1
            handle = self._file(self.paths[file])
            local = index - int(self.starts[file])
            data = np.asarray(handle["data"][local], dtype=np.int32)
            labels = np.asarray(handle["labels"][local], dtype=np.int32)
        sample = {name: data[row] for row, name in enumerate(self.data_rows)}
        sample.update({name: labels[row] for row, name in enumerate(self.label_rows)})
        return sample

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = {}
        return state


def bert_hdf5_loader(
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
    dataset_map_fn: Any = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
) -> DataLoader[Batch]:
    """The batches of the HDF5 files of ``data_dir``; the schema documents every argument."""
    if data_dir is None or mixture is not None or dataset_map_fn is not None:
        message = "BertHDF5DataProcessor takes data_dir (mixture, dataset_map_fn: not supported)"
        raise TrainingError(message)
    if max_sequence_length is not None:
        raise TrainingError("BertHDF5DataProcessor reads samples: max_sequence_length stays null")
    folders = [
        resolved("data_dir", d) for d in ([data_dir] if isinstance(data_dir, str) else data_dir)
    ]
    data_rows = ["input_ids", "attention_mask"]
    if use_vsl:
        data_rows += ["attention_span", "position_ids"]
    files = BertHDF5Files(
        list_h5_files(folders, sort=sort_files), data_rows, label_features(folders[0])
    )
    indices = subset_indices(len(files), data_subset)
    if not indices:
        raise TrainingError(f"no samples in {data_dir} (data_subset {data_subset!r})")
    order = MapOrder(
        indices, batch_size, shuffle=shuffle, shuffle_seed=shuffle_seed,
        num_samples=num_samples, drop_last=drop_last, pad_last=pad_last,
    )  # fmt: skip
    dataset = SampleBatches(files.sample, count=len(files))
    return loader(
        dataset,
        lambda rank, world: ShardedMapOrder(order, rank, world),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
