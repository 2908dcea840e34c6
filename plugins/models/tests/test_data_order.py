"""The order of both processors: shuffling, carry-over, subsets, and each rank's share."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

import plugtrain
from plugtrain.errors import TrainingError
from plugtrain_models.data.order import IterableOrder

MSL = 4


def _write_samples(folder: Path, counts: list[int], *, rows: int = 3) -> Path:
    """Files of samples whose input_ids are all equal to the sample's global number."""
    folder.mkdir(parents=True, exist_ok=True)
    first = 0
    for number, count in enumerate(counts):
        data = np.zeros((count, rows, MSL), dtype=np.int64)  # any integer dtype is read
        data[:, 0] = np.arange(first, first + count)[:, None]
        data[:, 1] = 1
        data[:, 2] = data[:, 0] + 1000
        with h5py.File(folder / f"f{number:02d}.h5", "w") as file:
            file.create_dataset("data", data=data)
            file.attrs["n_examples"] = count
        first += count
    return folder


def _map(folder: Path, **arguments: Any) -> Any:
    return plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")(
        data_dir=str(folder), **arguments
    )


def _iterable(folder: Path, **arguments: Any) -> Any:
    return plugtrain.resolve("dataloader", "GptHDF5DataProcessor")(
        data_dir=str(folder), **arguments
    )


def _epoch(loader: Any, epoch: int) -> list[list[int]]:
    loader.sampler.set_epoch(epoch)
    return [batch["input_ids"][:, 0].tolist() for batch in loader]


def test_corpus_windows_overlap_by_one_token(tmp_path: Path) -> None:
    tmp_path.joinpath("corpus").mkdir()
    with h5py.File(tmp_path / "corpus" / "c.h5", "w") as file:
        file.create_dataset("data", data=np.arange(50, dtype=np.int32))
    loader = _map(tmp_path / "corpus", batch_size=1, max_sequence_length=16, drop_last=False)
    batches = list(loader)
    assert len(batches) == 3  # (50 - 1) // 16
    for index, batch in enumerate(batches):
        start = index * 16
        assert batch["input_ids"].tolist() == [list(range(start, start + 16))]
        assert batch["labels"].tolist() == [list(range(start + 1, start + 17))]
        assert batch["attention_mask"].tolist() == [[1] * 16]


def test_shuffle_is_randperm_of_seed_plus_epoch(tmp_path: Path) -> None:
    loader = _map(_write_samples(tmp_path, [4, 6]), batch_size=5, shuffle=True, shuffle_seed=7)
    orders = []
    for epoch in range(2):
        flat = [i for batch in _epoch(loader, epoch) for i in batch]
        expected = torch.randperm(10, generator=torch.Generator().manual_seed(7 + epoch))
        assert flat == expected.tolist()
        orders.append(flat)
    assert orders[0] != orders[1]


def test_drop_last_carries_the_tail_into_the_next_epoch(tmp_path: Path) -> None:
    loader = _map(_write_samples(tmp_path, [5]), batch_size=2)
    assert _epoch(loader, 0) == [[0, 1], [2, 3]]
    assert len(loader) == 3  # after a pass: the next one's, epoch 1 (the sampler advances)
    assert _epoch(loader, 1) == [[4, 0], [1, 2], [3, 4]]
    assert len(loader) == 2
    assert _epoch(loader, 2) == [[0, 1], [2, 3]]
    loader.sampler.set_epoch(1)
    assert len(loader) == 3  # set_epoch chooses the epoch of the next pass


def test_without_drop_last_the_short_batch_is_yielded_or_padded(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path, [5])
    assert _epoch(_map(folder, batch_size=2, drop_last=False), 0) == [[0, 1], [2, 3], [4]]
    padded = list(_map(folder, batch_size=2, drop_last=False, pad_last=True))[-1]
    assert padded["input_ids"][:, 0].tolist() == [4, 0]
    assert padded["attention_mask"].tolist() == [[1] * MSL, [0] * MSL]


def test_num_samples_wraps_unshuffled_and_stretches_shuffled(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path, [5])
    flat = [i for b in _epoch(_map(folder, batch_size=1, num_samples=7), 0) for i in b]
    assert flat == [0, 1, 2, 3, 4, 0, 1]
    loader = _map(folder, batch_size=1, num_samples=12, shuffle=True, shuffle_seed=3)
    generator = torch.Generator().manual_seed(3 + 1)
    last = torch.randperm(5, generator=generator)
    stretched = torch.cat([torch.arange(5), torch.arange(5), last])
    expected = stretched[:12][torch.randperm(12, generator=generator)]
    assert [i for b in _epoch(loader, 1) for i in b] == expected.tolist()
    fewer = _map(folder, batch_size=1, num_samples=3, shuffle=True)
    head = torch.randperm(5, generator=torch.Generator().manual_seed(0))[:3]
    assert [i for b in _epoch(fewer, 0) for i in b] == head.tolist()


def test_data_subset_takes_fractions_of_the_range(tmp_path: Path) -> None:
    loader = _map(_write_samples(tmp_path, [10]), batch_size=8, data_subset="0.0-0.4,0.6-1.0")
    assert _epoch(loader, 0) == [[0, 1, 2, 3, 6, 7, 8, 9]]


def test_ranks_take_disjoint_rows_of_every_global_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _write_samples(tmp_path, [7, 6])
    alone = _epoch(_map(folder, batch_size=4, shuffle=True, shuffle_seed=5), 1)
    shares = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        shares.append(_epoch(_map(folder, batch_size=4, shuffle=True, shuffle_seed=5), 1))
    assert [a + b for a, b in zip(*shares, strict=True)] == alone
    rows = [{i for batch in share for i in batch} for share in shares]
    assert not rows[0] & rows[1]
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(TrainingError, match="divide evenly over the 3 processes"):
        _epoch(_map(folder, batch_size=4), 0)


def test_a_data_parallel_backend_keeps_the_sharded_sampler(tmp_path: Path) -> None:
    """The CPU/GPU backends re-shard a loader only when its sampler is no DistributedSampler."""
    shard_train_loader = pytest.importorskip("plugtrain_backends._parallel").shard_train_loader
    loader = _map(_write_samples(tmp_path, [4]), batch_size=2)
    assert shard_train_loader(loader, 0, 2) is loader


def test_a_resumed_stream_continues_exactly(tmp_path: Path) -> None:
    from plugtrain.train.data.stream import DataStream

    loader = _map(_write_samples(tmp_path, [5]), batch_size=2, shuffle=True, shuffle_seed=1)
    stream = DataStream(loader, None)
    for _ in range(3):
        stream.next()
    position = stream.position()
    rest = [stream.next()["input_ids"].tolist() for _ in range(4)]
    resumed = DataStream(loader, position)
    assert [resumed.next()["input_ids"].tolist() for _ in range(4)] == rest


def test_add_sink_tokens_inserts_masked_tokens(tmp_path: Path) -> None:
    transform = {"name": "add_sink_tokens", "sink_token_id": 9, "num_sink_tokens": 2}
    transform["sink_token_start_pos"] = 1
    folder = _write_samples(tmp_path, [2])
    batch = next(iter(_map(folder, batch_size=2, data_transforms=[transform])))
    assert batch["input_ids"].tolist() == [[0, 9, 9, 0, 0, 0], [1, 9, 9, 1, 1, 1]]
    assert batch["labels"][0].tolist() == [1000, 9, 9, 1000, 1000, 1000]
    assert batch["attention_mask"][0].tolist() == [1, 0, 0, 1, 1, 1]
    transform["truncate_to_original_length"] = True
    cut = next(iter(_map(tmp_path, batch_size=2, data_transforms=[transform])))
    assert cut["input_ids"].tolist() == [[0, 9, 9, 0], [1, 9, 9, 1]]


def test_use_vsl_reads_span_and_positions(tmp_path: Path) -> None:
    batch = next(iter(_map(_write_samples(tmp_path, [2], rows=5), batch_size=2, use_vsl=True)))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "attention_span", "position_ids"}


def test_iterable_ranks_read_every_other_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _write_samples(tmp_path, [3, 2, 4, 1])
    seen = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        batches = _epoch(_iterable(folder, batch_size=4, shuffle=False, drop_last=False), 0)
        assert all(len(b) <= 2 for b in batches)  # batch_size is global: 2 per rank
        seen.append([i for b in batches for i in b])
    assert seen == [[0, 1, 2, 5, 6, 7, 8], [3, 4, 9]]


def test_iterable_shuffle_is_seeded_files_then_a_buffer(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path, [3, 2, 4, 1])
    first = _epoch(_iterable(folder, batch_size=2, shuffle=True, shuffle_seed=4), 0)
    again = _epoch(_iterable(folder, batch_size=2, shuffle=True, shuffle_seed=4), 0)
    assert first == again
    files = [0, 1, 2, 3]
    random.Random(4).shuffle(files)
    starts = [0, 3, 5, 9, 10]
    stream = [i for f in files for i in range(starts[f], starts[f + 1])]
    # The buffer (10 x batch_size = 20) holds all 10 samples; at the end they are shuffled out.
    expected = list(stream)
    random.Random(4).shuffle(expected)
    expected.reverse()  # popped from the end
    assert [i for b in first for i in b] == expected


def test_iterable_readers_split_each_file_and_take_turns() -> None:
    order = IterableOrder(
        [0, 5, 8], 2, rank=0, world_size=1, shuffle=False, seed=0, buffer_size=20,
        readers=2, workers=True, drop_last=False,
    )  # fmt: skip
    # file 0 (5 samples): reader 0 takes 0-2, reader 1 takes 3-4; file 1 (3): 5-6 and 7
    assert list(order.batches(0)) == [[0, 1], [3, 4], [2, 5], [7], [6]]
    assert order.num_batches(0) == 5
    dropping = IterableOrder(
        [0, 5, 8], 2, rank=0, world_size=1, shuffle=True, seed=0, buffer_size=20,
        readers=2, workers=True, drop_last=True,
    )  # fmt: skip
    assert dropping.num_batches(0) == len(list(dropping.batches(0))) == 3


def test_iterable_with_workers_yields_every_sample_once(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path, [5, 3])
    loader = _iterable(folder, batch_size=2, shuffle=False, drop_last=False, num_workers=2)
    assert _epoch(loader, 0) == [[0, 1], [3, 4], [2, 5], [7], [6]]


def test_iterable_buffer_replaces_random_slots_once_full(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path, [6, 5])
    loader = _iterable(folder, batch_size=1, shuffle=True, shuffle_seed=2, shuffle_buffer=3)
    files = [0, 1]
    random.Random(2).shuffle(files)
    starts = [0, 6, 11]
    generator, buffer, expected = random.Random(2), [], []
    for sample in (i for f in files for i in range(starts[f], starts[f + 1])):
        if len(buffer) == 3:
            slot = generator.randint(0, 2)
            expected.append(buffer[slot])
            buffer[slot] = sample
        else:
            buffer.append(sample)
    generator.shuffle(buffer)
    expected.extend(reversed(buffer))
    assert [i for b in _epoch(loader, 0) for i in b] == expected
    assert sorted(expected) == list(range(11))


@pytest.mark.parametrize("processor", ["GptHDF5MapDataProcessor", "GptHDF5DataProcessor"])
def test_evaluation_batches_are_dealt_whole_by_the_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processor: str
) -> None:
    """No set_epoch (evaluation): global batches, which the backend deals out whole."""
    shard_eval_batches = pytest.importorskip("plugtrain_backends._parallel").shard_eval_batches
    folder = _write_samples(tmp_path, [5, 4, 3])
    build = plugtrain.resolve("dataloader", processor)
    arguments = {"data_dir": str(folder), "batch_size": 2, "shuffle": False, "drop_last": False}
    alone = [b["input_ids"][:, 0].tolist() for b in build(**arguments)]
    dealt = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        shard = shard_eval_batches(build(**arguments), rank, 2, None)
        dealt.append([b["input_ids"][:, 0].tolist() for b in shard])
    assert dealt == [alone[0::2], alone[1::2]]
    assert sorted(i for share in dealt for batch in share for i in batch) == list(range(12))
