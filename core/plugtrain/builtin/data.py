"""Built-in data loaders."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["synthetic_loader"]


def synthetic_loader(
    *,
    batch_size: int,
    num_examples: int = 1024,
    in_features: int = 64,
    num_classes: int = 10,
    split: str = "train",
    shuffle: bool | None = None,
    seed: int = 0,
    drop_last: bool = False,
) -> DataLoader:
    """Seeded classification data whose labels a linear model can learn.

    The labelling map depends on ``seed`` only, the inputs on ``seed`` and ``split``, so the
    train and val splits share a task but not examples.
    """
    task = torch.Generator().manual_seed(seed)
    weights = torch.randn(in_features, num_classes, generator=task)
    data = torch.Generator().manual_seed(seed * 2 + (0 if split == "train" else 1) + 1)
    inputs = torch.randn(num_examples, in_features, generator=data)
    labels = (inputs @ weights).argmax(dim=1)
    shuffle = split == "train" if shuffle is None else shuffle
    return DataLoader(
        TensorDataset(inputs, labels),
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed) if shuffle else None,
    )
