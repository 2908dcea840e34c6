"""What both processors build: a torch DataLoader whose sampler yields whole batches.

The sampler is a :class:`~torch.utils.data.DistributedSampler` that takes this process's share
itself, so a data-parallel backend keeps it as it is (the CPU and GPU backends re-shard only
training loaders without one). The dataset reads one batch of indices at a time and returns it
collated (int32 tensors ``[b, msl]``).

Training and evaluation share data differently in plugtrain: the Trainer calls ``set_epoch`` at
each epoch of training (as for any ``DistributedSampler``), and from then on the sampler yields
the rank's share of each batch; evaluation never calls it, so an evaluation loader yields the
global batches whole, and the backend deals them out to the processes whole (plugtrain's rule:
the summed metrics of all ranks equal those of one process).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from plugtrain.errors import TrainingError
from plugtrain_models.data.h5files import H5Files
from plugtrain_models.data.order import PAD

__all__ = ["BatchOrder", "BatchSampler", "H5Batches", "make_loader", "process_rank"]

Batch = dict[str, torch.Tensor]


class BatchOrder(Protocol):
    """An order of batches per epoch (:class:`~plugtrain_models.data.order.MapOrder`...)."""

    def batches(self, epoch: int) -> Iterator[list[int]]:
        """The batches of ``epoch`` as lists of sample indices."""

    def num_batches(self, epoch: int) -> int:
        """How many batches ``epoch`` has."""


def process_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this process.

    From the joined process group, else torchrun's ``RANK`` and ``WORLD_SIZE``, else ``(0, 1)``.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


class BatchSampler(DistributedSampler[list[int]]):
    """Yields the batches of the current epoch, whole or this process's share.

    Whole global batches until ``set_epoch`` is called (evaluation), then the share (training).
    Each pass reads the epoch ``set_epoch`` chose; when nobody called it since the last pass,
    with ``advance_each_pass`` the next epoch (Model Zoo's map sampler advances on each pass:
    iterated twice on its own, a shuffled loader gives epoch 0's permutation, then epoch 1's,
    and ``drop_last``'s leftovers of the first pass open the second), else the same epoch.

    :param order: builds the batch order of a share: ``order(rank, world_size)``; the
        process's rank is read at the first epoch, once the Trainer joined the process group.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        order: Callable[[int, int], BatchOrder],
        *,
        advance_each_pass: bool = False,
    ) -> None:
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=False)
        self.advance_each_pass = advance_each_pass
        self._make_order = order
        self._orders: dict[tuple[int, int], BatchOrder] = {}
        self._training = False
        self._passes = 0  # passes started
        self._chosen = False  # set_epoch called since the last pass started
        self._in_pass = False

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` of training: from now on, yield this process's share."""
        super().set_epoch(epoch)
        self._training = True
        self._chosen = True

    def _next_epoch(self) -> int:
        """The epoch the next pass reads: ``set_epoch``'s, else the last pass's + 1."""
        if self._chosen or self._passes == 0 or not self.advance_each_pass:
            return self.epoch
        return self.epoch + 1

    @property
    def order(self) -> BatchOrder:
        """The batch order in use: this process's share when training, else the whole."""
        share = process_rank() if self._training else (0, 1)
        if share not in self._orders:
            self._orders[share] = self._make_order(*share)
        self.rank, self.num_replicas = share
        return self._orders[share]

    def __iter__(self) -> Iterator[list[int]]:
        self.epoch = self._next_epoch()
        self._passes += 1
        self._chosen = False
        self._in_pass = True
        yield from self.order.batches(self.epoch)
        self._in_pass = False

    def __len__(self) -> int:
        """The batches of the pass under way, else of the next pass."""
        return self.order.num_batches(self.epoch if self._in_pass else self._next_epoch())


class H5Batches(Dataset[Batch]):
    """Batches of samples of :class:`H5Files`, read by a list of indices.

    :param features: the names of the rows of each sample, in order (extra rows are left out).
    :param transform: applied to each collated batch (``data_transforms``).
    """

    def __init__(
        self,
        files: H5Files,
        features: Sequence[str],
        transform: Callable[[Batch], Batch] | None = None,
    ) -> None:
        if len(features) > files.rows:
            message = (
                f"{files.paths[0]}: samples have {files.rows} rows, fewer than the features "
                f"{', '.join(features)}"
            )
            raise TrainingError(message)
        self.files = files
        self.features = list(features)
        self.transform = transform
        self._shape = (files.rows, files.sequence_length)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, indices: list[int]) -> Batch:
        rows = [
            self.files.sample(i) if i != PAD else np.zeros(self._shape, dtype=np.int32)
            for i in indices
        ]
        stacked = torch.from_numpy(np.stack(rows))
        batch = {name: stacked[:, row] for row, name in enumerate(self.features)}
        return self.transform(batch) if self.transform is not None else batch


def make_loader(
    dataset: H5Batches,
    order: Callable[[int, int], BatchOrder],
    *,
    num_workers: int,
    prefetch_factor: int | None,
    persistent_workers: bool,
    advance_each_pass: bool = False,
) -> DataLoader[Batch]:
    """The DataLoader of ``dataset`` in ``order``; worker options as Model Zoo sets them.

    :param advance_each_pass: see :class:`BatchSampler`.
    """
    options: dict[str, Any] = {}
    if num_workers > 0:
        options = {"prefetch_factor": prefetch_factor, "persistent_workers": persistent_workers}
    return DataLoader(
        dataset,
        batch_size=None,
        sampler=BatchSampler(dataset, order, advance_each_pass=advance_each_pass),
        num_workers=num_workers,
        collate_fn=_as_is,
        **options,
    )


def _as_is(batch: Any) -> Batch:
    """The dataset's batch as it is (it is collated already)."""
    return dict(batch)
