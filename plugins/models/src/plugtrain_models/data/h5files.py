"""The HDF5 files of one or more data folders, read as one virtual array of samples.

Model Zoo's on-disk format: each ``*.h5`` file holds a dataset ``data``,
either samples ``[n, rows, msl]`` (rows 0-2: input_ids, attention_mask, labels; 3-4 under VSL:
attention_span, position_ids) or a corpus ``[num_tokens]`` of ids, the files' tokens forming one
stream in file order. Values of any integer dtype are read as int32.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from plugtrain.errors import TrainingError

__all__ = ["H5Files", "list_h5_files", "read_features"]

DATASET = "data"
"""The name of the HDF5 dataset in every file."""


def list_h5_files(folders: Sequence[str], *, sort: bool = True) -> list[str]:
    """The ``*.h5`` files of ``folders`` (not recursive), pooled; sorted by path components.

    :raises TrainingError: a folder is missing or no folder holds a ``.h5`` file.
    """
    found: list[str] = []
    for folder in folders:
        if not os.path.isdir(folder):
            raise TrainingError(f"Path {folder} does not exist.")
        found.extend(
            os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".h5")
        )
    if not found:
        message = f"no .h5 files in {', '.join(folders)} (write them with plugtrain preprocess)"
        raise TrainingError(message)
    # Model Zoo sorts pathlib paths: by component, which differs from sorting the strings only
    # across folders ("data" before "data-2", whose "/" sorts after "-").
    return sorted(found, key=lambda path: Path(path).parts) if sort else found


def read_features(folder: str) -> list[str] | None:
    """The ``features`` of ``folder``'s ``data_params.json``, if it has one."""
    params = Path(folder) / "data_params.json"
    if not params.is_file():
        return None
    features = json.loads(params.read_text(encoding="utf-8")).get("features")
    return [str(f) for f in features] if isinstance(features, list) else None


class H5Files:
    """Several HDF5 files as one array of samples, in file order.

    The files are opened lazily in each process (DataLoader workers open their own handles).

    :param paths: the files, in the order that defines the sample order.
    :param max_sequence_length: for corpus files: the length of each sample; sample i is
        ``tokens[i·msl : i·msl + msl + 1]`` of the files' tokens laid end to end (a sample may
        span two files; consecutive samples share one token).
    :param need_count_attribute: every file must carry the ``n_examples`` attribute (the
        iterable processor's rule).
    :raises TrainingError: a file has no ``data``, files disagree in dtype or shape (naming
        both), a corpus without ``max_sequence_length``, a missing ``n_examples``.
    """

    def __init__(
        self,
        paths: Sequence[str],
        *,
        max_sequence_length: int | None = None,
        need_count_attribute: bool = False,
    ) -> None:
        self.paths = list(paths)
        self.max_sequence_length = max_sequence_length
        self._handles: dict[str, Any] = {}
        self._pid = os.getpid()
        shapes = [self._inspect(path, need_count_attribute) for path in self.paths]
        first_shape, first_dtype = shapes[0]
        for path, (shape, dtype) in zip(self.paths[1:], shapes[1:], strict=True):
            if shape[1:] != first_shape[1:] or dtype != first_dtype:
                message = (
                    f"{path}: data of shape {shape} ({dtype}) does not match {self.paths[0]}: "
                    f"{first_shape} ({first_dtype}); all files must agree after the first axis"
                )
                raise TrainingError(message)
        self.corpus = len(first_shape) == 1
        if self.corpus and max_sequence_length is None:
            message = f"{self.paths[0]}: a corpus file (rank 1) needs max_sequence_length"
            raise TrainingError(message)
        if not self.corpus and max_sequence_length is not None:
            message = (
                f"{self.paths[0]}: sample files carry their sequence length; "
                "max_sequence_length must stay null"
            )
            raise TrainingError(message)
        self.rows = 3 if self.corpus else int(first_shape[1])
        lengths = [shape[0] for shape, _ in shapes]
        # A corpus is one stream: its tokens' offsets per file; its samples as one "file".
        self.token_starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        msl = int(max_sequence_length or 1)
        self.counts = [max(0, (sum(lengths) - 1) // msl)] if self.corpus else lengths
        self.starts = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    def _inspect(self, path: str, need_count: bool) -> tuple[tuple[int, ...], Any]:
        with h5py.File(path, "r") as file:
            if DATASET not in file:
                raise TrainingError(f"{path}: no dataset named {DATASET!r}")
            data = file[DATASET]
            if not np.issubdtype(data.dtype, np.integer) or data.ndim not in (1, 3):
                message = f"{path}: data must be integers of rank 3 (samples) or 1 (corpus)"
                raise TrainingError(message)
            if need_count and "n_examples" not in data.attrs and "n_examples" not in file.attrs:
                message = f"{path}: the file has no 'n_examples' attribute"
                raise TrainingError(message)
            return tuple(data.shape), data.dtype

    def __len__(self) -> int:
        return int(self.starts[-1])

    @property
    def sequence_length(self) -> int:
        """The length of each sample."""
        if self.corpus:
            return int(self.max_sequence_length or 0)
        with h5py.File(self.paths[0], "r") as file:
            return int(file[DATASET].shape[2])

    def _data(self, path: str) -> Any:
        if self._pid != os.getpid():  # a forked worker opens its own handles
            self._handles, self._pid = {}, os.getpid()
        handle = self._handles.get(path)
        if handle is None:
            handle = self._handles[path] = h5py.File(path, "r")
        return handle[DATASET]

    def locate(self, index: int) -> tuple[int, int]:
        """``(file number, index in that file)`` of global sample ``index``."""
        file = int(np.searchsorted(self.starts, index, side="right")) - 1
        return file, index - int(self.starts[file])

    def sample(self, index: int) -> np.ndarray:
        """Sample ``index`` as int32 ``[rows, msl]`` (a corpus window as its three rows)."""
        if not self.corpus:
            file, local = self.locate(index)
            return np.asarray(self._data(self.paths[file])[local], dtype=np.int32)
        msl = int(self.max_sequence_length or 0)
        window = self._tokens(index * msl, index * msl + msl + 1)
        return np.stack([window[:-1], np.ones(msl, dtype=np.int32), window[1:]])

    def _tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``start..stop-1`` of a corpus, across file boundaries."""
        parts = []
        file = int(np.searchsorted(self.token_starts, start, side="right")) - 1
        while start < stop:
            offset = int(self.token_starts[file])
            end = min(stop, int(self.token_starts[file + 1]))
            parts.append(self._data(self.paths[file])[start - offset : end - offset])
            start, file = end, file + 1
        return np.concatenate(parts).astype(np.int32)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handles"] = {}  # open files are not sent to worker processes
        return state
