"""Samples made in batches: padded rows, Model Zoo's statistics, and each sample's HDF5 chunk.

Every file of ``plugtrain preprocess`` stores one sample per HDF5 chunk, gzip level 4. A
:class:`SampleBatch` carries the samples of a batch of records already compressed as those
chunks (what HDF5's deflate filter writes for them, byte for byte), so that the process that
writes the files only copies bytes, and a batch crosses between processes small.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence

import attrs
import numpy as np

__all__ = [
    "GZIP_LEVEL",
    "SampleBatch",
    "compress_samples",
    "padded_rows",
    "rows_stats",
    "sample_batch",
]

GZIP_LEVEL = 4
"""h5py's ``compression="gzip"`` level, used by every file written here."""

Chunk = bytes | np.ndarray
"""A sample's chunk: deflated bytes, or the sample itself where deflate would not shrink it
(HDF5's own filter then writes it)."""


@attrs.define
class SampleBatch:
    """The samples of a batch of records, in order, and what was counted making them.

    :ivar chunks: each sample's HDF5 chunk (see :data:`Chunk`).
    :ivar stats: Model Zoo's per-sample statistics summed over the samples
        (:func:`rows_stats`).
    :ivar shape: each sample's ``(rows, msl)``.
    """

    chunks: list[Chunk]
    stats: Counter[str]
    shape: tuple[int, int]


def padded_rows(
    token_ids: Sequence[Sequence[int] | np.ndarray],
    loss_masks: Sequence[Sequence[int] | np.ndarray],
    msl: int,
    pad_id: int,
) -> np.ndarray:
    """``[n, 3, msl]`` int32: each sample's tokens[:-1], mask[1:] and tokens[1:], padded.

    The input ids and labels are padded with ``pad_id``, the loss mask with 0.
    """
    rows = np.zeros((len(token_ids), 3, msl), dtype=np.int32)
    rows[:, 0] = rows[:, 2] = pad_id
    for number, (ids, mask) in enumerate(zip(token_ids, loss_masks, strict=True)):
        length = len(ids) - 1
        if length > 0:
            rows[number, 0, :length] = ids[:-1]
            rows[number, 1, :length] = mask[1:]
            rows[number, 2, :length] = ids[1:]
    return rows


def rows_stats(rows: np.ndarray, pad_id: int, eos_id: int) -> Counter[str]:
    """Model Zoo's ``get_data_stats`` of each sample of ``rows`` ``[n, r, msl]``, summed.

    A DPO sample (6 rows) counts its chosen and its rejected sequence, as one example.
    """
    stats: Counter[str] = Counter()
    if not len(rows):
        return stats
    halves = (rows[:, :3], rows[:, 3:]) if rows.shape[1] == 6 else (rows,)
    for half in halves:
        inputs = half[:, 0]
        valid = int(half[:, 1].sum(dtype=np.int64))
        tokens = inputs.size
        stats["num_pad_tokens"] += int((inputs == pad_id).sum())
        stats["non_pad_tokens"] += int(((inputs != eos_id) & (inputs != pad_id)).sum())
        stats["num_tokens"] += tokens
        stats["loss_valid_tokens"] += valid
        stats["num_masked_tokens"] += tokens - valid
    stats["n_examples"] += len(rows)
    return stats


def compress_samples(rows: np.ndarray) -> list[Chunk]:
    """Each sample of ``rows`` ``[n, r, msl]`` as its deflated HDF5 chunk."""
    data = np.ascontiguousarray(rows, dtype=np.int32)
    chunks: list[Chunk] = []
    for sample in data:
        packed = zlib.compress(sample, GZIP_LEVEL)  # a C-contiguous row: no copy
        chunks.append(packed if len(packed) < sample.nbytes else sample.copy())
    return chunks


def sample_batch(rows: np.ndarray, pad_id: int, eos_id: int) -> SampleBatch:
    """The :class:`SampleBatch` of ``rows`` ``[n, r, msl]``: its chunks and statistics."""
    shape = (int(rows.shape[1]), int(rows.shape[2]))
    return SampleBatch(compress_samples(rows), rows_stats(rows, pad_id, eos_id), shape)
