"""Writing samples as Model Zoo's HDF5 files: ``data-00000.h5``, ... and ``data_params.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from plugtrain_models.data.schemas import FEATURES

__all__ = ["SampleWriter", "write_corpus", "write_params"]


def _file_name(number: int) -> str:
    return f"data-{number:05d}.h5"  # zero-padded: sorted order is write order


def _write(path: Path, data: np.ndarray, chunks: tuple[int, ...]) -> None:
    with h5py.File(path, "w") as file:
        file.create_dataset("data", data=data, dtype="i4", chunks=chunks, compression="gzip")
        file.attrs["n_examples"] = int(data.shape[0])


class SampleWriter:
    """Writes ``[3, msl]`` (VSL: ``[5, msl]``) samples into files of ``samples_per_file``.

    :ivar files: the files written so far.
    :ivar samples: samples written so far.
    :ivar loss_valid_tokens: labels with loss mask 1.
    :ivar num_pad_tokens: labels with loss mask 0 (padding).
    """

    def __init__(self, output_dir: Path, msl: int, samples_per_file: int) -> None:
        self.output_dir, self.msl, self.samples_per_file = output_dir, msl, samples_per_file
        self._buffer: list[np.ndarray] = []
        self.files: list[Path] = []
        self.samples = self.loss_valid_tokens = self.num_pad_tokens = 0

    def add(self, samples: Iterable[np.ndarray]) -> None:
        """Queue samples; full files are written as they fill."""
        for sample in samples:
            self._buffer.append(sample)
            if len(self._buffer) == self.samples_per_file:
                self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        data = np.stack(self._buffer)
        path = self.output_dir / _file_name(len(self.files))
        _write(path, data, (1, data.shape[1], self.msl))
        self.files.append(path)
        self.samples += len(data)
        valid = int(data[:, 1].sum())
        self.loss_valid_tokens += valid
        self.num_pad_tokens += data.shape[0] * self.msl - valid
        self._buffer = []

    def close(self) -> None:
        """Write the last, partly filled file."""
        self._flush()


def write_corpus(
    output_dir: Path, tokens: np.ndarray, msl: int, samples_per_file: int
) -> list[Path]:
    """``tokens`` as rank-1 corpus files of ``samples_per_file · msl`` tokens (the last: the rest).

    A reader lays the files end to end again, so a sample may span two files.
    """
    span = samples_per_file * msl
    paths = []
    for number, start in enumerate(range(0, len(tokens), span)):
        part = tokens[start : start + span]
        path = output_dir / _file_name(number)
        with h5py.File(path, "w") as file:
            file.create_dataset("data", data=part.astype(np.int32), compression="gzip")
            file.attrs["n_examples"] = len(part) // msl
        paths.append(path)
    return paths


def write_params(output_dir: Path, params: Mapping[str, Any]) -> Path:
    """``data_params.json``: the features, the ids and statistics, and how it was made."""
    path = output_dir / "data_params.json"
    content = {"features": list(FEATURES), **params}  # params' own features win
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    return path
