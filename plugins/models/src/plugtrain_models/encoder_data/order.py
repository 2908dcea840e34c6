"""Which samples each global batch holds, and each process's rows of it.

Two orders, both pure functions of the arguments and the epoch, so that every process
computes the same global batches, a resumed run replays them exactly, and rank r of W takes
rows ``[r·B/W, (r+1)·B/W)`` of every global batch of B:

- :class:`EpochOrder` for data read by index: epoch e is the samples in file order, or
  with ``shuffle`` the permutation ``torch.randperm(N)`` of a generator seeded with
  ``shuffle_seed + e``; batches are cut from it, an incomplete last one dropped with
  ``drop_last``. Each item is ``(epoch, index)``, so a sample's random draws (BERT's masks)
  can depend on both.
- :class:`StreamOrder` for data streamed from text files (T5, the transformer), whose
  number of samples is known only once a pass is over: the items come from a function of the
  epoch, and the order cuts them into global batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from plugtrain.errors import TrainingError

__all__ = ["EpochOrder", "StreamOrder", "rank_rows"]


def rank_rows(batch_size: int, rank: int, world_size: int) -> slice:
    """Rank ``rank``'s rows of a global batch of ``batch_size``.

    :raises TrainingError: the global batch does not divide evenly over the processes.
    """
    if batch_size % world_size:
        message = (
            f"batch_size {batch_size} is the global batch: it must divide evenly over the "
            f"{world_size} processes"
        )
        raise TrainingError(message)
    share = batch_size // world_size
    return slice(rank * share, (rank + 1) * share)


class EpochOrder:
    """Global batches of ``(epoch, index)`` over ``count`` samples (see the module)."""

    def __init__(
        self,
        count: int,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.count, self.batch_size = count, batch_size
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.rows = rank_rows(batch_size, rank, world_size)
        if world_size > 1 and not drop_last and count % batch_size:
            message = (
                f"drop_last: false leaves a last batch of {count % batch_size} samples that "
                f"{world_size} processes cannot share evenly: keep drop_last true"
            )
            raise TrainingError(message)

    def permutation(self, epoch: int) -> list[int]:
        """Epoch ``epoch``'s samples in order."""
        if not self.shuffle:
            return list(range(self.count))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.count, generator=generator).tolist()

    def batches(self, epoch: int) -> Iterator[list[tuple[int, int]]]:
        """The rows of each global batch of ``epoch`` that this process takes."""
        order = self.permutation(epoch)
        for start in range(0, self.num_batches(epoch) * self.batch_size, self.batch_size):
            rows = order[start : start + self.batch_size][self.rows]
            yield [(epoch, index) for index in rows]

    def num_batches(self, epoch: int) -> int:
        """Batches per epoch (the same in every epoch)."""
        whole, rest = divmod(self.count, self.batch_size)
        return whole + (1 if rest and not self.drop_last else 0)


class StreamOrder:
    """Global batches of the items ``items(epoch)`` yields (see the module).

    Its length is not known before a pass: ``len()`` of its loader raises ``TypeError``, as
    for any iterable data set.
    """

    def __init__(
        self,
        items: Callable[[int], Iterator[Any]],
        batch_size: int,
        *,
        drop_last: bool,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.items, self.batch_size, self.drop_last = items, batch_size, drop_last
        self.world_size = world_size
        self.rows = rank_rows(batch_size, rank, world_size)

    def batches(self, epoch: int) -> Iterator[list[Any]]:
        """The rows of each global batch of ``epoch`` that this process takes."""
        batch: list[Any] = []
        for item in self.items(epoch):
            batch.append(item)
            if len(batch) == self.batch_size:
                yield batch[self.rows]
                batch = []
        if batch and not self.drop_last:
            if self.world_size > 1:
                message = (
                    f"drop_last: false leaves a last batch of {len(batch)} samples that "
                    f"{self.world_size} processes cannot share evenly: keep drop_last true"
                )
                raise TrainingError(message)
            yield batch

    def num_batches(self, epoch: int) -> int:
        """Unknown before a pass over the files."""
        message = "a streamed data set has no length before a pass over its files"
        raise TypeError(message)
