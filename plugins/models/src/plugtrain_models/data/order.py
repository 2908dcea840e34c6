"""Which samples each batch of each epoch holds, for both processors (indices only, no data).

Everything is a pure function of the arguments and the epoch, so a resumed run replays exactly
and every rank computes the same global order. ``PAD`` marks a padding row (loss mask 0).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch

__all__ = ["PAD", "IterableOrder", "MapOrder", "split_evenly"]

PAD = -1
"""The index of a padding row: zeros with a zero loss mask."""


class MapOrder:
    """GptHDF5MapDataProcessor's order: global batches over a stream of epochs.

    Epoch e of ``M`` samples (``num_samples`` or N) is ``0..M-1`` wrapped modulo N, or with
    ``shuffle`` a permutation from ``torch.Generator().manual_seed(shuffle_seed + e)``. Batch k
    is samples ``[k·B, (k+1)·B)`` of the epochs laid end to end. With ``drop_last``, epoch e
    yields the batches that end inside it, so an incomplete tail opens the next epoch; without
    it, every epoch starts a fresh batch and ends with a short one (or one padded to B).

    :param indices: the samples (global indices, after ``data_subset``).
    """

    def __init__(
        self,
        indices: Sequence[int],
        batch_size: int,
        *,
        shuffle: bool = False,
        shuffle_seed: int = 0,
        num_samples: int | None = None,
        drop_last: bool = True,
        pad_last: bool = False,
    ) -> None:
        self.indices = torch.as_tensor(list(indices), dtype=torch.int64)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.shuffle_seed = shuffle_seed
        self.per_epoch = num_samples if num_samples is not None else len(self.indices)
        self.drop_last = drop_last
        self.pad_last = pad_last
        self._recent: dict[int, torch.Tensor] = {}  # a batch spans at most two epochs

    def epoch_positions(self, epoch: int) -> torch.Tensor:
        """Epoch ``epoch``'s order as positions into ``indices`` (``per_epoch`` of them)."""
        if epoch not in self._recent:
            if len(self._recent) >= 2:
                del self._recent[min(self._recent)]
            self._recent[epoch] = self._positions(epoch)
        return self._recent[epoch]

    def _positions(self, epoch: int) -> torch.Tensor:
        n, m = len(self.indices), self.per_epoch
        if not self.shuffle:
            return torch.arange(m) % n
        generator = torch.Generator().manual_seed(self.shuffle_seed + epoch)
        if m <= n:
            return torch.randperm(n, generator=generator)[:m]
        repeats = -(-m // n)
        stacked = [torch.arange(n)] * (repeats - 1) + [torch.randperm(n, generator=generator)]
        stretched = torch.cat(stacked)[:m]
        return stretched[torch.randperm(m, generator=generator)]

    def _stream(self, start: int, stop: int) -> list[int]:
        """Samples ``start..stop-1`` of the epochs laid end to end."""
        m = self.per_epoch
        found: list[int] = []
        epoch = start // m
        while start < stop:
            positions = self.epoch_positions(epoch)
            end = min(stop, (epoch + 1) * m)
            found.extend(self.indices[positions[start - epoch * m : end - epoch * m]].tolist())
            start, epoch = end, epoch + 1
        return found

    def batch_range(self, epoch: int) -> tuple[int, int]:
        """``(first, last + 1)`` global batch numbers of ``epoch`` (with ``drop_last``)."""
        m, b = self.per_epoch, self.batch_size
        return epoch * m // b, (epoch + 1) * m // b

    def batches(self, epoch: int) -> Iterator[list[int]]:
        """The global batches of ``epoch``, each a list of sample indices (``PAD`` for padding)."""
        b = self.batch_size
        if self.drop_last:
            first, stop = self.batch_range(epoch)
            for k in range(first, stop):
                yield self._stream(k * b, (k + 1) * b)
            return
        order = self._stream(epoch * self.per_epoch, (epoch + 1) * self.per_epoch)
        for start in range(0, len(order), b):
            batch = order[start : start + b]
            if len(batch) < b and self.pad_last:
                batch += [PAD] * (b - len(batch))
            yield batch

    def num_batches(self, epoch: int) -> int:
        """How many batches ``epoch`` yields."""
        if self.drop_last:
            first, stop = self.batch_range(epoch)
            return stop - first
        return -(-self.per_epoch // self.batch_size)


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """``count`` items in ``parts`` contiguous ranges; the first ``count % parts`` get one more."""
    size, extra = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        stop = start + size + (1 if part < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


class IterableOrder:
    """GptHDF5DataProcessor's order for one rank: its files, its readers, their buffers.

    Rank r of W reads ``files[r::W]``, shuffled with ``random.Random(seed).shuffle`` when
    ``shuffle``. Each of K readers (DataLoader workers; one when there are none) reads its
    contiguous part of every file. With ``shuffle`` a reader's samples pass through a buffer of
    ``buffer_size``: once full, each new sample replaces (and yields) a random one of it, and
    the rest is shuffled and yielded last to first (Python ``random`` seeded with ``seed``, plus the
    reader's number when there are workers). Each reader's samples are cut into batches of
    ``batch_size`` (the last one dropped when short, with ``drop_last``), and the readers'
    batches take turns, as a torch DataLoader takes its workers' batches.

    Epoch e > 0 adds e to every seed, so epochs differ; epoch 0 is Model Zoo's order.

    :param file_starts: the global index of each file's first sample, and the total at the end.
    """

    def __init__(
        self,
        file_starts: Sequence[int],
        batch_size: int,
        *,
        rank: int,
        world_size: int,
        shuffle: bool,
        seed: int,
        buffer_size: int,
        readers: int,
        workers: bool,
        drop_last: bool,
    ) -> None:
        self.file_starts = list(file_starts)
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.buffer_size = shuffle, seed, buffer_size
        self.readers, self.workers = readers, workers
        self.drop_last = drop_last

    def files(self, epoch: int) -> list[int]:
        """The numbers of this rank's files, in reading order."""
        mine = list(range(len(self.file_starts) - 1))[self.rank :: self.world_size]
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(mine)
        return mine

    def _reader_samples(self, reader: int, epoch: int) -> Iterator[int]:
        for file in self.files(epoch):
            first, stop = self.file_starts[file], self.file_starts[file + 1]
            start, end = split_evenly(stop - first, self.readers)[reader]
            yield from range(first + start, first + end)

    def _shuffled(self, samples: Iterator[int], reader: int, epoch: int) -> Iterator[int]:
        generator = random.Random(self.seed + epoch + (reader if self.workers else 0))
        buffer: list[int] = []
        for sample in samples:
            if len(buffer) < self.buffer_size:
                buffer.append(sample)
                continue
            slot = generator.randrange(self.buffer_size)
            yield buffer[slot]
            buffer[slot] = sample
        generator.shuffle(buffer)
        yield from reversed(buffer)  # Model Zoo pops the shuffled rest from its end

    def _reader_batches(self, reader: int, epoch: int) -> list[list[int]]:
        samples = self._reader_samples(reader, epoch)
        if self.shuffle:
            samples = self._shuffled(samples, reader, epoch)
        flat = list(samples)
        batches = [flat[i : i + self.batch_size] for i in range(0, len(flat), self.batch_size)]
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        return batches

    def batches(self, epoch: int) -> Iterator[list[int]]:
        """The rank's batches of ``epoch``: the readers' batches in turn."""
        per_reader = [self._reader_batches(r, epoch) for r in range(self.readers)]
        for turn in range(max((len(b) for b in per_reader), default=0)):
            for batches in per_reader:
                if turn < len(batches):
                    yield batches[turn]

    def num_batches(self, epoch: int) -> int:
        """How many batches this rank yields in ``epoch`` (the same in every epoch)."""
        counts = [0] * self.readers
        for file in self.files(epoch):
            size = self.file_starts[file + 1] - self.file_starts[file]
            for reader, (start, stop) in enumerate(split_evenly(size, self.readers)):
                counts[reader] += stop - start
        whole = [
            c // self.batch_size if self.drop_last else -(-c // self.batch_size) for c in counts
        ]
        return sum(whole)
