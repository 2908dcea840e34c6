"""The built-in StdlibText data: byte-level language-model batches of the standard library."""

from __future__ import annotations

import math

import pytest
import torch

from plugtrain.builtin.text import (
    byte_unigram_entropy,
    stdlib_corpus,
    stdlib_root,
    stdlib_text_loader,
)


def test_stdlib_text_splits_are_deterministic_disjoint_and_shifted_by_one():
    train = stdlib_text_loader(batch_size=4, block_size=32, max_bytes=20_000, shuffle=False)
    val = stdlib_text_loader(batch_size=4, block_size=32, split="val", max_bytes=20_000)
    again = stdlib_text_loader(batch_size=4, block_size=32, split="val", max_bytes=20_000)
    assert set(train.dataset.starts.tolist()).isdisjoint(val.dataset.starts.tolist())
    assert len(train.dataset) + len(val.dataset) == (20_000 - 1) // 32
    assert len(val.dataset) == 62
    assert torch.equal(val.dataset.starts, again.dataset.starts)
    batch = next(iter(train))
    assert batch["input_ids"].shape == batch["labels"].shape == (4, 32)
    torch.testing.assert_close(batch["input_ids"][:, 1:], batch["labels"][:, :-1])
    corpus = stdlib_corpus(20_000)
    start = int(train.dataset.starts[0])
    assert bytes(batch["input_ids"][0].tolist()) == corpus[start : start + 32]
    first = min(stdlib_root().glob("*.py"), key=lambda path: path.name)
    assert corpus.startswith(first.read_bytes()[:1000])


def test_byte_unigram_entropy_is_in_nats():
    assert byte_unigram_entropy(b"aabb") == pytest.approx(math.log(2))
    assert byte_unigram_entropy(bytes(range(256))) == pytest.approx(math.log(256))
    assert byte_unigram_entropy(b"zzzz") == 0.0
