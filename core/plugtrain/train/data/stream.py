"""The data stream: endless batches over epochs that know their place, so a resume is exact."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from plugtrain.errors import TrainingError
from plugtrain.train.data.global_sampler import GlobalBatchSampler

__all__ = ["DataStream", "batch_size", "known_empty"]


class DataStream:
    """Endless batches over epochs, resumable exactly.

    It records the RNG at each epoch start and how many batches of the epoch were consumed, and
    counts the examples (``samples``) and tokens (``tokens``) it hands out (not part of its
    position). A loader that follows the global sample order (:mod:`.global_sampler`) also
    records the global sample position, the world size, the global batch and the data's
    fingerprint, and resumes there without loading a batch, at any world size; a stateful loader
    (``state_dict`` and ``load_state_dict``) saves its state and resumes itself; any other loader
    resumes by replaying the consumed batches of the epoch.
    """

    def __init__(
        self,
        loader: Iterable[Any],
        position: Mapping[str, Any] | None,
        *,
        batches_per_epoch: int | None = None,
        count_tokens: Callable[[Any], int] | None = None,
        count_loss_tokens: Callable[[Any], int] | None = None,
    ) -> None:
        """Read ``loader`` from ``position`` (``None``: from the start).

        :param batches_per_epoch: end an epoch after this many batches (``steps_per_epoch``);
            ``None``: when the loader is exhausted.
        :param count_tokens: a batch's tokens, summed in ``tokens`` (``None``: none counted).
        :param count_loss_tokens: a batch's tokens that count in the loss (padding and prompts
            left out), summed in ``loss_tokens`` (``None``: none counted).
        """
        self.loader = loader
        self.batches_per_epoch = batches_per_epoch
        self.generator: torch.Generator | None = getattr(loader, "generator", None)
        self.epoch = 0
        self.consumed = 0
        self.samples = 0
        self.tokens = 0
        self.loss_tokens = 0
        self.count_tokens = count_tokens
        self.count_loss_tokens = count_loss_tokens
        self._iterator: Iterator[Any] | None = None
        self._epoch_rng: dict[str, Any] = {}
        if position is not None:
            self._resume(position)

    def _start_epoch(self) -> None:
        # A DistributedSampler (data parallel) or the global order's batch sampler draws each
        # epoch's permutation from its epoch.
        for name in ("sampler", "batch_sampler"):
            set_epoch = getattr(getattr(self.loader, name, None), "set_epoch", None)
            if callable(set_epoch):
                set_epoch(self.epoch)
        self._epoch_rng = {"torch": torch.get_rng_state()}
        if self.generator is not None:
            self._epoch_rng["generator"] = self.generator.get_state()
        self._iterator = iter(self.loader)
        self.consumed = 0

    def _resume(self, position: Mapping[str, Any]) -> None:
        current = torch.get_rng_state()
        torch.set_rng_state(position["epoch_rng"]["torch"])
        if self.generator is not None and "generator" in position["epoch_rng"]:
            self.generator.set_state(position["epoch_rng"]["generator"])
        self.epoch = int(position["epoch"])
        sampler = getattr(self.loader, "batch_sampler", None)
        if isinstance(sampler, GlobalBatchSampler) and "order" in position:
            consumed = sampler.resume_batches(position["order"])
            sampler.start_at(consumed)  # no batch is loaded to find the place
            self._start_epoch()
        elif "loader_state" in position and _stateful(self.loader):
            consumed = int(position["consumed"])
            self.loader.load_state_dict(position["loader_state"])  # type: ignore[attr-defined]
            self._start_epoch()  # the loader's own state says where its iteration continues
        else:
            consumed = int(position["consumed"])
            self._start_epoch()
            for _ in range(consumed):
                next(self._iterator)  # type: ignore[arg-type]
        self.consumed = consumed
        torch.set_rng_state(current)

    def next(self) -> Any:
        """The next batch, starting a new epoch when one ends."""
        if self._iterator is None:
            self._start_epoch()
        if self.batches_per_epoch is not None and self.consumed >= self.batches_per_epoch:
            self.epoch += 1
            self._start_epoch()
        try:
            batch = next(self._iterator)  # type: ignore[arg-type]
        except StopIteration:
            self.epoch += 1
            self._start_epoch()
            try:
                batch = next(self._iterator)  # type: ignore[arg-type]
            except StopIteration:
                message = "the training data loader yields no batch"
                raise TrainingError(message) from None
        self.consumed += 1
        self.samples += batch_size(batch)
        if self.count_tokens is not None:
            self.tokens += self.count_tokens(batch)
        if self.count_loss_tokens is not None:
            self.loss_tokens += self.count_loss_tokens(batch)
        return batch

    def position(self) -> dict[str, Any]:
        """Where the stream is, for a checkpoint."""
        if self._iterator is None:
            self._start_epoch()
        position = {"epoch": self.epoch, "consumed": self.consumed, "epoch_rng": self._epoch_rng}
        sampler = getattr(self.loader, "batch_sampler", None)
        if isinstance(sampler, GlobalBatchSampler):
            position["order"] = sampler.position(self.consumed)
        elif _stateful(self.loader):
            position["loader_state"] = self.loader.state_dict()  # type: ignore[attr-defined]
        return position


def _stateful(loader: Any) -> bool:
    """Whether ``loader`` saves and restores its own place (``state_dict``/``load_state_dict``)."""
    return callable(getattr(loader, "state_dict", None)) and callable(
        getattr(loader, "load_state_dict", None)
    )


def batch_size(batch: Any) -> int:
    """Examples in a batch: the first dimension of its first tensor (1 when it has none).

    The first tensor of a list or tuple is its first item; of a mapping, its first tensor value;
    of another object, the object itself when it is a tensor.
    """
    if isinstance(batch, list | tuple):
        first = batch[0] if batch else None
    elif isinstance(batch, Mapping):
        first = next((v for v in batch.values() if isinstance(v, torch.Tensor)), None)
    else:
        first = batch
    return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() else 1


def known_empty(loader: Iterable[Any] | None) -> bool:
    """Whether ``loader`` is known to yield nothing (it has a length of 0)."""
    try:
        return loader is not None and len(loader) == 0  # type: ignore[arg-type]
    except TypeError:
        return False
