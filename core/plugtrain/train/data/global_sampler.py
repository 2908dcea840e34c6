"""A torch DataLoader made to follow the global sample order (:mod:`.sample_order`).

``loop.sample_order: global`` (the default) rebuilds a map-style ``DataLoader`` that has a
``batch_size`` with a :class:`GlobalBatchSampler` for this process, on one process as on
many, so that a run file gives the same samples per optimizer step at any world size and
accumulation split. The permutations' seed is the loader generator's seed, else the
Trainer's ``seed``, else 0. A loader that cannot follow (not a ``DataLoader``, an iterable
dataset, its own ``batch_sampler`` or a custom sampler) keeps its own order, and the log
says that its sample order depends on the world size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, RandomSampler, Sampler, SequentialSampler

from plugtrain.bases.backend import rebuild_dataloader
from plugtrain.config.sections import LoopSettings
from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.errors import ConfigError, ConfigIssue, TrainingError
from plugtrain.train.data.sample_order import GlobalOrder
from plugtrain.train.observability import say_once

__all__ = ["GlobalBatchSampler", "follow_global_order", "in_global_order"]

log = logging.getLogger("plugtrain")


class GlobalBatchSampler(Sampler[list[int]]):
    """The micro-batches of one process under a :class:`GlobalOrder`, epoch by epoch.

    ``sharded`` tells a data-parallel backend that it yields this process's share already.

    :param order: the global order.
    :param rank: this process.
    """

    sharded = True

    def __init__(self, order: GlobalOrder, rank: int, fingerprint: dict[str, Any]) -> None:
        self.order = order
        self.rank = rank
        self.fingerprint = fingerprint
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose permutation the next iteration follows."""
        self.epoch = epoch

    def start_at(self, batch: int) -> None:
        """Begin the next iteration at micro-batch ``batch`` of the epoch (a resume)."""
        self.start = batch

    def __iter__(self) -> Iterator[list[int]]:
        permutation = self.order.permutation(self.epoch)
        start, self.start = self.start, 0
        for index in range(start, self.order.batches_per_epoch):
            yield self.order.batch(permutation, self.rank, index)

    def position(self, consumed: int) -> dict[str, Any]:
        """Where an epoch stands after ``consumed`` micro-batches of this process.

        ``samples``: the global samples of the epoch consumed by every process.
        """
        order = self.order
        return {
            "samples": consumed * order.batch_size * order.world_size,
            "global_batch": order.global_batch,
            "world_size": order.world_size,
            "fingerprint": dict(self.fingerprint),
        }

    def resume_batches(self, saved: Mapping[str, Any]) -> int:
        """The micro-batches of this process a saved :meth:`position` stands for.

        :raises TrainingError: the data or the global batch differ from the checkpoint's.
        """
        if dict(saved["fingerprint"]) != self.fingerprint:
            message = (
                f"the training data differ from the checkpoint's: it was written with "
                f"{_describe(saved['fingerprint'])}, this run has {_describe(self.fingerprint)}"
            )
            raise TrainingError(message)
        order = self.order
        if int(saved["global_batch"]) != order.global_batch:
            message = (
                f"the global batch differs from the checkpoint's: it was written with "
                f"{saved['global_batch']} samples per optimizer step, this run takes "
                f"{order.global_batch} ({order.batch_size} per process x {order.world_size} "
                f"processes x {order.grad_accum_steps} micro-batches)"
            )
            raise TrainingError(message)
        written = int(saved["world_size"])
        if written != order.world_size:
            log.info(
                "the checkpoint was written by %d process%s, resuming on %d: the global sample "
                "order continues at sample %d of the epoch",
                written,
                "" if written == 1 else "es",
                order.world_size,
                int(saved["samples"]),
            )
        return int(saved["samples"]) // (order.batch_size * order.world_size)

    def __len__(self) -> int:
        return self.order.batches_per_epoch


def _why_not(loader: Any) -> str | None:
    """Why ``loader`` cannot follow the global order, or ``None`` when it can."""
    if not isinstance(loader, DataLoader):
        return f"it is a {type(loader).__name__}, not a torch DataLoader"
    if isinstance(loader.dataset, IterableDataset):
        return "its dataset is an IterableDataset"
    if loader.batch_size is None:
        return "it has its own batch_sampler"
    if not isinstance(loader.dataset, Sized):
        return "its dataset has no length"
    if not isinstance(loader.sampler, RandomSampler | SequentialSampler):
        return f"it has its own sampler ({type(loader.sampler).__name__})"
    if isinstance(loader.sampler, RandomSampler) and (
        loader.sampler.replacement or loader.sampler.num_samples != len(loader.dataset)
    ):
        return "its RandomSampler draws with replacement or a num_samples"
    return None


LOADING_ARGUMENTS = frozenset(
    {"batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers"}
)
"""Loader arguments left out of the data fingerprint: how the data is loaded, not which (the
per-process batch changes with the world size; the global batch is checked on its own)."""


def follow_global_order(
    loader: Iterable[Any],
    *,
    rank: int,
    world_size: int,
    grad_accum_steps: int,
    seed: int | None,
    description: Mapping[str, Any] | None = None,
) -> tuple[Iterable[Any], str | None]:
    """``loader`` rebuilt to follow the global order, or ``loader`` and why it cannot.

    :param seed: the Trainer's seed, used when the loader has no generator.
    :param description: the loader's ``name`` and ``arguments`` from the run file, for the
        data fingerprint (without :data:`LOADING_ARGUMENTS`).
    :raises ConfigError: the global batch is larger than the dataset.
    """
    reason = _why_not(loader)
    if reason is not None:
        return loader, reason
    assert isinstance(loader, DataLoader)
    assert isinstance(loader.dataset, Sized)
    assert loader.batch_size is not None
    generator = loader.generator
    order = GlobalOrder(
        num_samples=len(loader.dataset),
        batch_size=loader.batch_size,
        world_size=world_size,
        grad_accum_steps=grad_accum_steps,
        seed=int(generator.initial_seed()) if generator is not None else (seed or 0),
        shuffle=isinstance(loader.sampler, RandomSampler),
    )
    if order.steps_per_epoch == 0:
        message = (
            f"the global batch ({loader.batch_size} per process x {world_size} processes x "
            f"{grad_accum_steps} micro-batches = {order.global_batch}) is larger than the "
            f"training data's {order.num_samples} samples"
        )
        raise ConfigError([ConfigIssue("loop.grad_accum_steps", message)])
    fingerprint: dict[str, Any] = {
        "dataset": type(loader.dataset).__qualname__,
        "num_samples": order.num_samples,
        "shuffle": order.shuffle,
        "seed": order.seed,
    }
    if description is not None:
        fingerprint["loader"] = description["name"]
        arguments = dict(description.get("arguments") or {})
        fingerprint["arguments"] = {
            key: value for key, value in arguments.items() if key not in LOADING_ARGUMENTS
        }
    return rebuild_dataloader(
        loader, batch_sampler=GlobalBatchSampler(order, rank, fingerprint)
    ), None


def _describe(fingerprint: Mapping[str, Any]) -> str:
    return ", ".join(f"{key} {value!r}" for key, value in sorted(fingerprint.items()))


def in_global_order(
    loader: Iterable[Any],
    loop: LoopSettings | None,
    strategy: ParallelStrategy,
    *,
    backend_type: str,
    seed: int | None,
    description: Mapping[str, Any] | None,
) -> Iterable[Any]:
    """A training loader following ``loop.sample_order`` (else, or without a loop, as it is).

    :param strategy: the backend's strategy: whether it takes the global order, and this
        process's rank among how many.
    :param backend_type: the backend's name, said when its strategy cannot take the order.
    :param seed: the trainer's seed (the permutations' seed when the loader has none).
    :param description: the loader's name and arguments as a run file gives them (part of its
        fingerprint).
    """
    if loop is None or loop.sample_order != "global":
        return loader
    if not getattr(strategy, "global_sample_order", False):
        say_once(
            "sample_order:backend",
            f"the {backend_type} backend's parallel strategy does not take "
            "training data in the global sample order (global_sample_order), so "
            "loop.sample_order global does not apply: the data loader's own order is used",
        )
        return loader
    ordered, reason = follow_global_order(
        loader,
        rank=getattr(strategy, "rank", 0),
        world_size=getattr(strategy, "world_size", 1),
        grad_accum_steps=loop.grad_accum_steps,
        seed=seed,
        description=description,
    )
    if reason is not None:
        say_once(
            f"sample_order:{reason}",
            f"the training data loader cannot follow the global sample order ({reason}): "
            "its samples per step depend on the number of processes, and a resume at "
            "another number of processes is not exact",
        )
    return ordered
