"""Byte-level language-model batches from a corpus every Python install has: its own stdlib.

The corpus is the standard library's top-level ``*.py`` files (``sysconfig``'s ``stdlib``
folder, not its packages), read in name order and joined with a newline, up to ``max_bytes``.
It needs no download; it is the same on every install of one Python version (another version's
standard library is another corpus). Bytes are the tokens (a vocabulary of 256).

The corpus is cut into blocks of ``block_size`` bytes (each with the byte after it as the last
label), and a seeded permutation holds ``val_fraction`` of the blocks out for validation, so
both splits come from the same files. A batch is ``{"input_ids", "labels"}`` of shape
``[batch_size, block_size]``, the labels being the inputs shifted by one byte.
"""

from __future__ import annotations

import functools
import math
import sysconfig
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from plugtrain.errors import TrainingError

__all__ = ["ByteBlocks", "byte_unigram_entropy", "stdlib_corpus", "stdlib_text_loader"]


def stdlib_root() -> Path:
    """The folder of the running Python's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


@functools.cache
def stdlib_corpus(max_bytes: int) -> bytes:
    """The first ``max_bytes`` bytes of the stdlib corpus (the module docstring says which).

    :raises TrainingError: the standard library has no ``.py`` source files (a stripped
        install), naming the folder.
    """
    root = stdlib_root()
    files = sorted(root.glob("*.py"), key=lambda path: path.name)
    if not files:
        message = f"{root}: no Python source files for the StdlibText corpus (a stripped install)"
        raise TrainingError(message)
    parts: list[bytes] = []
    size = 0
    for path in files:
        parts.append(path.read_bytes() + b"\n")
        size += len(parts[-1])
        if size >= max_bytes:
            break
    return b"".join(parts)[:max_bytes]


def byte_unigram_entropy(data: bytes) -> float:
    """The entropy of the byte frequencies of ``data``, in nats per byte.

    The loss of the best model that ignores context; a language model's loss on the same bytes
    (also in nats) is to be compared with it.
    """
    counts = torch.bincount(
        torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), minlength=256
    )
    p = counts[counts > 0].double() / len(data)
    return float(-(p * p.log()).sum())


class ByteBlocks(Dataset[dict[str, torch.Tensor]]):
    """Blocks of a byte tensor as ``{"input_ids", "labels"}``, labels shifted by one."""

    def __init__(self, tokens: torch.Tensor, starts: torch.Tensor, block_size: int) -> None:
        self.tokens = tokens
        self.starts = starts
        self.block_size = block_size

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        start = int(self.starts[index])
        window = self.tokens[start : start + self.block_size + 1]
        return {"input_ids": window[:-1], "labels": window[1:]}


def stdlib_text_loader(
    *,
    batch_size: int,
    block_size: int = 128,
    split: str = "train",
    val_fraction: float = 0.1,
    max_bytes: int = 1_000_000,
    shuffle: bool | None = None,
    seed: int = 0,
    drop_last: bool = False,
) -> DataLoader[dict[str, torch.Tensor]]:
    """A data loader of byte-level language-model batches over a seeded split of the corpus."""
    corpus = stdlib_corpus(max_bytes)
    tokens = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).long()
    blocks = (len(tokens) - 1) // block_size
    if blocks < 2:
        message = f"the corpus ({len(tokens)} bytes) holds fewer than 2 blocks of {block_size}"
        raise TrainingError(message)
    order = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed))
    held_out = max(1, math.floor(blocks * val_fraction))
    chosen = order[:held_out] if split == "val" else order[held_out:]
    shuffle = split == "train" if shuffle is None else shuffle
    return DataLoader(
        ByteBlocks(tokens, chosen.sort().values * block_size, block_size),
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        generator=torch.Generator().manual_seed(seed + 1) if shuffle else None,
    )
