"""From samples to the torch DataLoader the encoders' processors return.

A :class:`SampleBatches` builds each sample of a list of order items with a function and
stacks them into tensors; :func:`loader` wraps it in the DataLoader of the decoders' data
(:func:`plugtrain_models.data.loader.make_loader`), whose sampler yields this process's rows
of each global batch once training starts and whole global batches for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from plugtrain.errors import TrainingError
from plugtrain_models.data.loader import make_loader

__all__ = ["Batch", "Sample", "SampleBatches", "loader", "stack"]

Batch = dict[str, torch.Tensor]
Sample = dict[str, np.ndarray]


def stack(samples: Sequence[Sample], where: Callable[[int], str] | None = None) -> Batch:
    """The samples' features stacked along a new first axis, as tensors.

    :param where: names sample i in an error (its file and row).
    :raises TrainingError: samples differ in their features or their shapes.
    """
    first = samples[0]
    batch: Batch = {}
    for name, value in first.items():
        arrays = []
        for number, sample in enumerate(samples):
            array = sample.get(name)
            if array is None or np.shape(array) != np.shape(value):
                place = where(number) if where is not None else f"sample {number}"
                shape = None if array is None else np.shape(array)
                message = (
                    f"{place}: feature {name!r} has shape {shape}, the batch's first sample "
                    f"{np.shape(value)}; every row must have the same lengths"
                )
                raise TrainingError(message)
            arrays.append(array)
        batch[name] = torch.from_numpy(np.stack(arrays))
    return batch


class SampleBatches(Dataset[Batch]):
    """Batches built sample by sample from order items.

    :param make: one sample from one order item.
    :param finish: applied to each stacked batch (features of the whole batch).
    :param count: the number of samples, when known.
    :param describe: where an order item's sample comes from (its file and row), for errors.
    """

    def __init__(
        self,
        make: Callable[[Any], Sample],
        *,
        finish: Callable[[Batch], Batch] | None = None,
        count: int = 0,
        describe: Callable[[Any], str] | None = None,
    ) -> None:
        self.make, self.finish, self.count = make, finish, count
        self.describe = describe

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, items: list[Any]) -> Batch:
        describe = self.describe
        where = (lambda n: describe(items[n])) if describe is not None else None
        batch = stack([self.make(item) for item in items], where)
        return self.finish(batch) if self.finish is not None else batch


def loader(
    dataset: SampleBatches,
    order: Callable[[int, int], Any],
    *,
    num_workers: int,
    prefetch_factor: int | None,
    persistent_workers: bool,
) -> DataLoader[Batch]:
    """The DataLoader of ``dataset`` in ``order`` (``order(rank, world_size)``)."""
    return make_loader(
        dataset,  # type: ignore[arg-type]
        order,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
