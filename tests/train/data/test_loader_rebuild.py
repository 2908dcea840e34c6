"""A DataLoader rebuilt for sharding or the global sample order keeps every loading option.

The core (``loop.sample_order: global``) and the data-parallel backends rebuild a user's
DataLoader with a new sampler; everything else must stay the user's, the ``generator`` above
all: it seeds the workers (``base_seed``), so a loader that lost it would give its workers
other seeds, and its random augmentations other numbers, than the loader the user wrote.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from plugtrain.backend_base import rebuild_dataloader
from plugtrain.train.data.global_sampler import follow_global_order

NUM_SAMPLES = 16


class WorkerSeeds(Dataset[tuple[int, int]]):
    """Sample ``i`` is ``(i, the seed of the worker that loaded it)``."""

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[int, int]:
        info = get_worker_info()
        return index, -1 if info is None else info.seed


def _note_worker(worker_id: int, calls: Any = None) -> None:
    """A worker_init_fn (a partial of it, so that the test can tell it is the same one)."""


def _loader(**options: Any) -> DataLoader[Any]:
    return DataLoader(
        WorkerSeeds(),
        batch_size=4,
        shuffle=True,
        generator=torch.Generator().manual_seed(1234),
        **options,
    )


def _seeds_and_samples(loader: Any) -> tuple[set[int], list[int]]:
    seeds: set[int] = set()
    samples: list[int] = []
    for indices, worker_seeds in loader:
        samples.extend(indices.tolist())
        seeds.update(worker_seeds.tolist())
    return seeds, samples


def test_every_loading_option_is_copied_and_the_sampling_replaced():
    init = functools.partial(_note_worker, calls=[])
    loader = _loader(
        num_workers=2,
        worker_init_fn=init,
        persistent_workers=True,
        prefetch_factor=3,
        pin_memory_device="cpu",
        timeout=30,
        multiprocessing_context="spawn",
    )
    sampler = torch.utils.data.SequentialSampler(loader.dataset)
    rebuilt = rebuild_dataloader(loader, sampler=sampler, batch_size=2, drop_last=True)
    assert rebuilt is not loader
    assert rebuilt.dataset is loader.dataset
    assert rebuilt.generator is loader.generator
    assert rebuilt.worker_init_fn is init
    assert rebuilt.collate_fn is loader.collate_fn
    assert rebuilt.multiprocessing_context is loader.multiprocessing_context
    for name in ("num_workers", "persistent_workers", "prefetch_factor", "timeout"):
        assert getattr(rebuilt, name) == getattr(loader, name), name
    assert rebuilt.pin_memory_device == "cpu"
    assert (rebuilt.sampler, rebuilt.batch_size, rebuilt.drop_last) == (sampler, 2, True)


def test_the_backends_sharding_keeps_the_generator_so_the_workers_seeds():
    parallel = pytest.importorskip("plugtrain_backends._parallel")
    torch.manual_seed(0)  # the global RNG: what a loader without its generator would draw from
    expected, _ = _seeds_and_samples(_loader(num_workers=2))
    assert len(expected) == 2
    assert -1 not in expected

    loader = _loader(num_workers=2)
    sharded = parallel.shard_train_loader(loader, 0, 1)
    assert isinstance(sharded.sampler, torch.utils.data.DistributedSampler)
    assert sharded.generator is loader.generator
    torch.manual_seed(99)
    seeds, samples = _seeds_and_samples(sharded)
    assert seeds == expected
    assert sorted(samples) == list(range(NUM_SAMPLES))

    evaluated = parallel.shard_eval_batches(_loader(num_workers=2), 0, 1, 2)
    torch.manual_seed(99)
    assert _seeds_and_samples(evaluated)[0] == expected


def test_the_global_sample_order_keeps_the_generator_so_the_workers_seeds():
    torch.manual_seed(0)
    expected, _ = _seeds_and_samples(_loader(num_workers=2))
    loader = _loader(num_workers=2, persistent_workers=True)
    ordered, reason = follow_global_order(
        loader, rank=0, world_size=1, grad_accum_steps=1, seed=None
    )
    assert reason is None
    assert isinstance(ordered, DataLoader)
    assert ordered is not loader
    assert ordered.generator is loader.generator
    assert ordered.persistent_workers
    torch.manual_seed(99)
    seeds, samples = _seeds_and_samples(ordered)
    assert seeds == expected
    assert sorted(samples) == list(range(NUM_SAMPLES))
