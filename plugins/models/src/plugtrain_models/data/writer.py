"""Writing samples as Model Zoo's HDF5 files: ``data-00000.h5``, ... and ``data_params.json``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from plugtrain_models.data.sample_chunks import Chunk, compress_samples
from plugtrain_models.data.schemas import FEATURES

__all__ = ["ChunkWriter", "SampleWriter", "write_corpus", "write_params"]


def _file_name(number: int) -> str:
    return f"data-{number:05d}.h5"  # zero-padded: sorted order is write order


def _write_chunks(path: Path, chunks: list[Chunk], shape: tuple[int, int]) -> None:
    """One file of samples ``[len(chunks), *shape]``, each sample one chunk, as h5py writes it."""
    with h5py.File(path, "w") as file:
        data = file.create_dataset(
            "data", shape=(len(chunks), *shape), dtype="i4", chunks=(1, *shape), compression="gzip"
        )
        for number, chunk in enumerate(chunks):
            if isinstance(chunk, bytes):
                data.id.write_direct_chunk((number, 0, 0), chunk)
            else:  # deflate would not shrink it: the filter decides how it is stored
                data[number] = chunk
        file.attrs["n_examples"] = len(chunks)


class ChunkWriter:
    """Writes samples given as their HDF5 chunks into files of ``samples_per_file``, in order.

    Only the chunks of the file being filled are held; each file is written when it is full.

    :ivar files: the files written so far.
    :ivar samples: samples written so far.
    """

    def __init__(self, output_dir: Path, samples_per_file: int) -> None:
        self.output_dir, self.samples_per_file = output_dir, samples_per_file
        self._buffer: list[Chunk] = []
        self._shape: tuple[int, int] | None = None
        self.files: list[Path] = []
        self.samples = 0

    def add(self, chunks: Iterable[Chunk], shape: tuple[int, int]) -> None:
        """Queue the chunks of samples of ``shape`` (rows, msl); full files are written."""
        self._shape = shape
        for chunk in chunks:
            self._buffer.append(chunk)
            if len(self._buffer) == self.samples_per_file:
                self._flush()

    def _flush(self) -> None:
        if not self._buffer or self._shape is None:
            return
        path = self.output_dir / _file_name(len(self.files))
        _write_chunks(path, self._buffer, self._shape)
        self.files.append(path)
        self.samples += len(self._buffer)
        self._buffer = []

    def close(self) -> None:
        """Write the last, partly filled file."""
        self._flush()


class SampleWriter:
    """Writes ``[3, msl]`` (VSL: ``[5, msl]``) samples into files of ``samples_per_file``.

    Each sample is compressed as it comes; a file is written when it is full.

    :ivar files: the files written so far.
    :ivar samples: samples written so far.
    :ivar loss_valid_tokens: labels with loss mask 1.
    :ivar num_pad_tokens: labels with loss mask 0 (padding).
    """

    def __init__(self, output_dir: Path, msl: int, samples_per_file: int) -> None:
        self.msl = msl
        self._chunks = ChunkWriter(output_dir, samples_per_file)
        self.loss_valid_tokens = self.num_pad_tokens = 0

    @property
    def files(self) -> list[Path]:
        """The files written so far."""
        return self._chunks.files

    @property
    def samples(self) -> int:
        """Samples written so far."""
        return self._chunks.samples

    def add(self, samples: Iterable[np.ndarray]) -> None:
        """Queue samples; full files are written as they fill."""
        for sample in samples:
            valid = int(sample[1].sum())
            self.loss_valid_tokens += valid
            self.num_pad_tokens += self.msl - valid
            self._chunks.add(compress_samples(sample[None]), (sample.shape[0], self.msl))

    def close(self) -> None:
        """Write the last, partly filled file."""
        self._chunks.close()


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
