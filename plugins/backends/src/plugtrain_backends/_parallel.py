"""Data parallel training through torch.distributed, shared by the CPU and GPU backends.

The processes are started by torchrun (by ``plugtrain fit`` itself or by the user), which sets
``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; this module joins them into one process group,
wraps the model in DDP, shards the data and reduces evaluation sums.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

from plugtrain.backend_base import rebuild_dataloader
from plugtrain.errors import BackendError
from plugtrain.launching import LaunchedProcess, exit_after_atexit_handlers, launched_process

__all__ = [
    "GLOO_EXIT_SWITCH",
    "ProcessGroup",
    "attempt_store",
    "gloo_exit_workaround",
    "shard_eval_batches",
    "shard_train_loader",
]

log = logging.getLogger("plugtrain")


class ProcessGroup:
    """The place of this process in a data-parallel run (a single process when not launched).

    :param backend_type: ``"CPU"`` or ``"GPU"``, for messages.
    :param dist_backend: ``"gloo"`` or ``"nccl"``.
    :param timeout: seconds a collective waits before failing the run.
    :param init_method: torch's init method; ``None`` reads torchrun's environment.
    """

    def __init__(
        self,
        backend_type: str,
        dist_backend: str,
        timeout: float,
        init_method: str | None = None,
    ) -> None:
        self.backend_type = backend_type
        self.dist_backend = dist_backend
        self.timeout = timeout
        self.init_method = init_method
        self.launched: LaunchedProcess | None = launched_process()

    @property
    def world_size(self) -> int:
        """Number of processes in the run (1 when not launched)."""
        return self.launched.world_size if self.launched else 1

    @property
    def rank(self) -> int:
        """The global rank of this process."""
        return self.launched.rank if self.launched else 0

    @property
    def local_rank(self) -> int:
        """The rank of this process on its machine (its GPU index)."""
        return self.launched.local_rank if self.launched else 0

    @property
    def distributed(self) -> bool:
        """Whether more than one process takes part."""
        return self.world_size > 1

    def join(self, *, device_id: torch.device | None = None) -> None:
        """Join the process group once per process (every later call returns at once)."""
        if not self.distributed or dist.is_initialized():
            return
        options: dict[str, Any] = {}
        if device_id is not None:
            options["device_id"] = device_id
        timeout = datetime.timedelta(seconds=self.timeout)
        try:
            store = None if self.init_method else attempt_store(timeout)
            if store is not None:
                options["store"] = store
            dist.init_process_group(
                backend=self.dist_backend,
                init_method=self.init_method,
                timeout=timeout,
                world_size=self.world_size,
                rank=self.rank,
                **options,
            )
        except (RuntimeError, ValueError) as exc:
            message = (
                f"{self.backend_type} backend: rank {self.rank} of {self.world_size} could not "
                f"join the {self.dist_backend} process group: {exc}"
            )
            raise BackendError(message) from exc
        atexit.register(_leave)
        log.info(
            "rank %d of %d joined the %s process group (timeout %gs)",
            self.rank,
            self.world_size,
            self.dist_backend,
            self.timeout,
        )

    def leave(self) -> None:
        """Wait for every process, then leave the process group (after a run that went well).

        Leaving together matters: a process that tears its connections down while another
        still uses them can abort it.
        """
        if self.distributed and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
            if self.dist_backend == "gloo" and gloo_exit_workaround(str(torch.__version__)):
                exit_after_atexit_handlers(
                    f"torch {torch.__version__}: a gloo worker may abort in interpreter teardown"
                )

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Sum each value over every process (one all-reduce); a single process returns a copy."""
        if not self.distributed:
            return dict(sums)
        device = torch.device("cuda", self.local_rank) if self.dist_backend == "nccl" else None
        values = torch.tensor(list(sums.values()), dtype=torch.float64, device=device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        reduced = values.cpu().tolist()
        return {
            name: type(original)(total)
            for (name, original), total in zip(sums.items(), reduced, strict=True)
        }


def attempt_store(
    timeout: datetime.timedelta, environ: Mapping[str, str] | None = None
) -> dist.Store | None:
    """The store of this restart attempt of a one-machine torchrun run, else ``None`` (env://).

    torchrun's agents share one TCPStore (at ``MASTER_ADDR:MASTER_PORT``) for the whole run
    unless ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (which ``plugtrain fit`` sets when it starts
    torchrun itself): the workers of every restart attempt connect to it as clients
    (``TORCHELASTIC_USE_AGENT_STORE=True``), and torch's ``env://`` rendezvous no longer prefixes
    their keys per attempt. Restarted workers then find the keys the failed attempt left (the
    process group's rank addresses, barrier counters), connect to dead peers or pass barriers
    early, and the group does not form. Under an outside torchrun on one machine each attempt
    gets its own namespace here, ``plugtrain/<run id>/attempt_<restart count>/``. On several
    machines the restart counts of the agents differ (a node restarted because another failed
    does not count a restart), so no per-attempt name is common to all ranks: a warning asks
    for ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` when restarts are allowed.
    """
    environ = os.environ if environ is None else environ
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if environ.get("GROUP_WORLD_SIZE", "1") != "1":
        if environ.get("TORCHELASTIC_MAX_RESTARTS", "0") != "0" and environ.get("RANK") == "0":
            log.warning(
                "torchrun shares one rendezvous store over restarts: a restarted group may find "
                "the failed attempt's keys and not form; start torchrun with "
                "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in its environment (plugtrain fit does)"
            )
        return None
    store = dist.TCPStore(
        host_name=environ["MASTER_ADDR"],
        port=int(environ["MASTER_PORT"]),
        world_size=int(environ["WORLD_SIZE"]),
        is_master=False,
        timeout=timeout,
    )
    attempt = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    run_id = environ.get("TORCHELASTIC_RUN_ID", "none")
    return dist.PrefixStore(f"plugtrain/{run_id}/attempt_{attempt}", store)


GLOO_EXIT_SWITCH = "PLUGTRAIN_GLOO_EXIT_WORKAROUND"
"""``0`` turns the gloo exit workaround off, ``1`` turns it on for any torch version."""

GLOO_EXIT_AFFECTED = (2, 13)
"""The oldest torch seen to abort a gloo worker in interpreter teardown (no fixed one known).

After a data-parallel run over gloo, a worker sometimes aborts while the interpreter shuts down
("terminate called without an active exception", SIGABRT) although its work is done and the
process group was destroyed: reproduced with torch 2.13 and a ten-line script in about one run
of ten. On these versions ``plugtrain fit`` ends such a worker right after its atexit handlers.
"""


def gloo_exit_workaround(torch_version: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether a gloo worker of ``torch_version`` should skip the interpreter's teardown.

    :param environ: where :data:`GLOO_EXIT_SWITCH` is read (default ``os.environ``).
    """
    switch = (os.environ if environ is None else environ).get(GLOO_EXIT_SWITCH, "").strip()
    if switch in ("0", "1"):
        return switch == "1"
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    return match is not None and (int(match[1]), int(match[2])) >= GLOO_EXIT_AFFECTED


def _leave() -> None:
    # At exit after an error: no barrier, the other processes may be gone.
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: nn.Module, device: torch.device, group: ProcessGroup) -> nn.Module:
    """Move ``model`` to ``device`` and, in a distributed run, wrap it in DDP."""
    model = model.to(device)
    if not group.distributed:
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def shard_train_loader(loader: Any, rank: int, world_size: int) -> Any:
    """The same DataLoader with a :class:`DistributedSampler`: each rank gets its own share.

    Shuffling follows the original loader (a ``RandomSampler`` shuffles); the shuffle seed is
    the loader generator's seed (0 without one) so that every rank draws the same permutation.
    The Trainer calls the sampler's ``set_epoch`` at each epoch.
    """
    if isinstance(getattr(loader, "sampler", None), DistributedSampler):
        return loader
    if getattr(getattr(loader, "batch_sampler", None), "sharded", False):
        return loader  # the Trainer's global sample order: this process's share already
    if not isinstance(loader, DataLoader):
        message = (
            "data-parallel training shards a torch DataLoader; got "
            f"{type(loader).__name__}. Pass a DataLoader, or one with a DistributedSampler"
        )
        raise BackendError(message)
    if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
        message = (
            "data-parallel training cannot shard a DataLoader over an IterableDataset or with "
            "its own batch_sampler; give it a DistributedSampler yourself"
        )
        raise BackendError(message)
    shuffle = isinstance(loader.sampler, RandomSampler)
    seed = int(loader.generator.initial_seed()) if loader.generator is not None else 0
    sampler = DistributedSampler(
        loader.dataset,
        num_replicas=world_size,
        rank=rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=loader.drop_last,
    )
    return rebuild_dataloader(
        loader, sampler=sampler, batch_size=loader.batch_size, drop_last=loader.drop_last
    )


class _EveryNth:
    """Items ``rank, rank + n, ...`` among the first ``limit`` of ``items``."""

    def __init__(self, items: Iterable[Any], rank: int, n: int, limit: int | None) -> None:
        self.items, self.rank, self.n, self.limit = items, rank, n, limit

    def __iter__(self) -> Iterator[Any]:
        for index, item in enumerate(self.items):
            if self.limit is not None and index >= self.limit:
                return
            if index % self.n == self.rank:
                yield item

    def __len__(self) -> int:
        total = len(self.items)  # type: ignore[arg-type]
        if self.limit is not None:
            total = min(total, self.limit)
        return max(0, (total - self.rank + self.n - 1) // self.n)


def shard_eval_batches(
    loader: Iterable[Any], rank: int, world_size: int, max_batches: int | None
) -> Iterable[Any]:
    """The share of ``rank`` in the first ``max_batches`` batches: batches ``rank, rank + n, ...``.

    Whole batches are dealt out, without padding, so the summed metrics of all ranks equal those
    of one process over the same batches. For a DataLoader only the batch indices are dealt
    out, so no rank loads another's data.
    """
    if world_size == 1 and max_batches is None:
        return loader
    if isinstance(loader, DataLoader) and loader.batch_sampler is not None:
        shard = _EveryNth(loader.batch_sampler, rank, world_size, max_batches)
        return rebuild_dataloader(loader, batch_sampler=shard)
    return _EveryNth(loader, rank, world_size, max_batches)
