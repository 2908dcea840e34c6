"""Sharding the data of a data-parallel run, in one process (ranks given explicitly)."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from plugtrain.builtin.data import synthetic_loader
from plugtrain_backends._parallel import ProcessGroup, shard_eval_batches, shard_train_loader


def _loader(shuffle: bool, size: int = 10, batch_size: int = 2, seed: int = 7) -> DataLoader:
    data = TensorDataset(torch.arange(size), torch.arange(size))
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator)


def _indices(loader) -> list[int]:
    return [int(i) for batch, _ in loader for i in batch]


def test_train_shards_are_disjoint_and_cover_the_data():
    shards = [_indices(shard_train_loader(_loader(shuffle=False), r, 2)) for r in range(2)]
    assert shards == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_train_shards_shuffle_alike_on_every_rank_and_change_with_the_epoch():
    loaders = [shard_train_loader(_loader(shuffle=True), r, 2) for r in range(2)]
    first = [_indices(loader) for loader in loaders]
    assert sorted(first[0] + first[1]) == list(range(10))
    for loader in loaders:
        loader.sampler.set_epoch(1)
    second = [_indices(loader) for loader in loaders]
    assert sorted(second[0] + second[1]) == list(range(10))
    assert second != first


def test_train_shard_keeps_batch_size_and_drop_last():
    loader = synthetic_loader(batch_size=4, num_examples=18, drop_last=True)
    shard = shard_train_loader(loader, 1, 2)
    assert shard.batch_size == 4
    assert shard.drop_last
    assert len(shard) == 2


def test_eval_batches_are_dealt_out_whole_without_padding():
    loader = _loader(shuffle=False, size=7, batch_size=2)
    shards = [[b.tolist() for b, _ in shard_eval_batches(loader, r, 2, None)] for r in range(2)]
    assert shards == [[[0, 1], [4, 5]], [[2, 3], [6]]]
    limited = [[b.tolist() for b, _ in shard_eval_batches(loader, r, 2, 3)] for r in range(2)]
    assert limited == [[[0, 1], [4, 5]], [[2, 3]]]
    assert [len(shard_eval_batches(loader, r, 2, 3)) for r in range(2)] == [2, 1]


def test_eval_limit_applies_in_one_process_and_to_plain_iterables():
    loader = _loader(shuffle=False, size=7, batch_size=2)
    assert shard_eval_batches(loader, 0, 1, None) is loader
    assert len(list(shard_eval_batches(loader, 0, 1, 2))) == 2
    batches = [torch.tensor([i]) for i in range(5)]
    assert [int(b) for b in shard_eval_batches(batches, 1, 2, None)] == [1, 3]


def test_a_process_nobody_launched_reduces_sums_to_a_copy(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    group = ProcessGroup("CPU", "gloo", 10.0)
    assert (group.rank, group.world_size, group.distributed) == (0, 1, False)
    sums = {"loss_sum": 1.5, "examples": 3}
    assert group.reduce_sums(sums) == sums
    group.join()  # nothing to join
