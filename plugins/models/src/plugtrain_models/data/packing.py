"""Token streams cut into Model Zoo samples, with the corrections of spec 4.4.

Model Zoo 2.10's packing writes no EOS between documents and overwrites the last token of a
document's last full chunk with one. Here every document ends with EOS in the stream
``T = tok(d1) + [eos] + tok(d2) + [eos] + ...``, and no token is overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

__all__ = ["Packer", "first_fit", "sample_rows"]


def sample_rows(chunk: list[int], msl: int, pad_id: int) -> np.ndarray:
    """One sample ``[3, msl]`` from a chunk of at most ``msl + 1`` tokens.

    Row 0 = chunk[:-1], row 2 = chunk[1:] (padded with ``pad_id``), row 1 = 1 where a label
    is a real token, 0 on the padding.
    """
    padded = chunk + [pad_id] * (msl + 1 - len(chunk))
    rows = np.empty((3, msl), dtype=np.int32)
    rows[0] = padded[:-1]
    rows[2] = padded[1:]
    rows[1] = 0
    rows[1, : len(chunk) - 1] = 1
    return rows


class Packer:
    """Cuts documents' tokens into samples of ``msl`` (chunks of ``msl + 1`` tokens, no overlap).

    :param pack: concatenate documents (``False``: each document is chunked on its own).
    :param min_sequence_length: a final partial chunk shorter than this is dropped; a longer
        one is padded.
    """

    def __init__(
        self,
        msl: int,
        eos_id: int,
        pad_id: int,
        *,
        pack: bool = True,
        min_sequence_length: int = 10,
    ) -> None:
        self.msl, self.eos_id, self.pad_id = msl, eos_id, pad_id
        self.pack, self.min_sequence_length = pack, min_sequence_length
        self._pending: list[int] = []
        self.dropped_tokens = 0

    def _full_chunks(self) -> Iterator[np.ndarray]:
        size = self.msl + 1
        done = 0
        while len(self._pending) - done >= size:
            yield sample_rows(self._pending[done : done + size], self.msl, self.pad_id)
            done += size
        del self._pending[:done]

    def _tail(self) -> Iterator[np.ndarray]:
        tail, self._pending = self._pending, []
        if not tail:
            return
        if len(tail) >= max(2, self.min_sequence_length):
            yield sample_rows(tail, self.msl, self.pad_id)
        else:
            self.dropped_tokens += len(tail)

    def add(self, tokens: Iterable[int]) -> Iterator[np.ndarray]:
        """The samples completed by one more document (its tokens, then EOS)."""
        self._pending.extend(tokens)
        self._pending.append(self.eos_id)
        yield from self._full_chunks()
        if not self.pack:
            yield from self._tail()

    def finish(self) -> Iterator[np.ndarray]:
        """The final partial chunk, padded, if it is long enough."""
        yield from self._tail()

    def add_many(self, documents: Sequence[np.ndarray], *, finish: bool = False) -> np.ndarray:
        """:meth:`add` of each document (then :meth:`finish` if ``finish``), as ``[n, 3, msl]``.

        The same samples in the same order, cut with numpy.
        """
        size = self.msl + 1
        eos = np.array([self.eos_id], dtype=np.int64)
        rows: list[np.ndarray] = []
        if self.pack:
            parts = [np.asarray(self._pending, dtype=np.int64)]
            for tokens in documents:
                parts += [np.asarray(tokens, dtype=np.int64), eos]
            stream = np.concatenate(parts)
            full = len(stream) // size * size
            rows.append(_full_rows(stream[:full], size))
            self._pending = stream[full:].tolist()
        else:
            for tokens in documents:
                stream = np.concatenate([np.asarray(tokens, dtype=np.int64), eos])
                full = len(stream) // size * size
                rows.append(_full_rows(stream[:full], size))
                self._pending = stream[full:].tolist()
                rows.extend(sample[None] for sample in self._tail())
        if finish:
            rows.extend(sample[None] for sample in self._tail())
        return np.concatenate(rows) if rows else np.zeros((0, 3, self.msl), dtype=np.int32)


def _full_rows(stream: np.ndarray, size: int) -> np.ndarray:
    """Samples ``[n, 3, size - 1]`` of a stream of whole chunks of ``size`` tokens."""
    chunks = stream.reshape(-1, size)
    rows = np.empty((len(chunks), 3, size - 1), dtype=np.int32)
    rows[:, 0] = chunks[:, :-1]
    rows[:, 1] = 1
    rows[:, 2] = chunks[:, 1:]
    return rows


def first_fit(lengths: Iterable[int], capacity: int) -> list[list[int]]:
    """The items' indices in bins of ``capacity`` (first fit).

    Each item, in order, joins the earliest bin that still has room for it (a new bin when
    none has).

    :raises ValueError: an item longer than ``capacity``.
    """
    bins: list[list[int]] = []
    room: list[int] = []
    for index, length in enumerate(lengths):
        if length > capacity:
            raise ValueError(f"item {index} of {length} does not fit in a bin of {capacity}")
        target = next((b for b, free in enumerate(room) if free >= length), None)
        if target is None:
            bins.append([])
            room.append(capacity)
            target = len(bins) - 1
        bins[target].append(index)
        room[target] -= length
    return bins
