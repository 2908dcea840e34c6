"""Built-in data loaders."""

from __future__ import annotations

import functools
import gzip
from importlib import resources

import torch
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["digits_loader", "load_digits", "synthetic_loader"]

DIGITS_EXAMPLES = 1797
DIGITS_FEATURES = 64


@functools.cache
def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1,797 digit images as ``(float32 [N, 64] in [0, 1], int64 [N] labels)``."""
    packed = resources.files("plugtrain.builtin").joinpath("data/digits.u8.gz").read_bytes()
    raw = torch.frombuffer(bytearray(gzip.decompress(packed)), dtype=torch.uint8)
    table = raw.view(DIGITS_EXAMPLES, DIGITS_FEATURES + 1)
    inputs = table[:, :DIGITS_FEATURES].to(torch.float32) / 16.0
    labels = table[:, DIGITS_FEATURES].to(torch.int64)
    return inputs, labels


def digits_loader(
    *,
    batch_size: int,
    split: str = "train",
    val_fraction: float = 0.2,
    shuffle: bool | None = None,
    seed: int = 0,
    drop_last: bool = False,
) -> DataLoader[tuple[torch.Tensor, ...]]:
    """A data loader over a seeded train/val split of the digits."""
    inputs, labels = load_digits()
    order = torch.randperm(DIGITS_EXAMPLES, generator=torch.Generator().manual_seed(seed))
    held_out = round(DIGITS_EXAMPLES * val_fraction)
    if split == "train":
        order = order[held_out:]
    elif split == "val":
        order = order[:held_out]
    shuffle = split == "train" if shuffle is None else shuffle
    return DataLoader(
        TensorDataset(inputs[order], labels[order]),
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed + 1) if shuffle else None,
    )


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
) -> DataLoader[tuple[torch.Tensor, ...]]:
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
