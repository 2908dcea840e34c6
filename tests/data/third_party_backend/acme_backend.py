"""A third party's data-parallel CPU backend, written against plugtrain's documented API only.

Imports from plugtrain: ``hookimpl``, ``plugtrain.backend_base``, ``plugtrain.strategy``,
``plugtrain.launching`` and ``plugtrain.schema``, as docs/plugin-api.md describes. Each rank
writes what it saw to ``ACME_REPORT_DIR`` for the test to read.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Mapping
from typing import Any

import attrs
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from plugtrain import hookimpl
from plugtrain.backend_base import BackendBase
from plugtrain.launching import exit_after_atexit_handlers, launched_process
from plugtrain.schema import arg
from plugtrain.strategy import ParallelStrategy


@attrs.frozen
class AcmeArgs:
    """Data parallel over gloo on this machine's CPU."""

    num_processes: int = arg(2, help="processes plugtrain fit starts", gt=0)


class AcmeStrategy(ParallelStrategy):
    """DDP with gradients reduced on the last micro-batch of a step only."""

    def micro_batch_context(self, model: Any, *, synchronize: bool) -> Any:
        self.backend.contexts.append(synchronize)
        if synchronize or not hasattr(model, "no_sync"):
            return super().micro_batch_context(model, synchronize=synchronize)
        return model.no_sync()


class AcmeBackend(BackendBase):
    """Joins the processes torchrun started, wraps the model in DDP, shards the data."""

    backend_type = "AcmeCPU"
    schema = AcmeArgs

    def configure(self, arguments: Mapping[str, Any]) -> None:
        super().configure(arguments)
        self.launched = launched_process()
        self.contexts: list[bool] = []

    @staticmethod
    def processes_per_node(arguments: Mapping[str, Any]) -> int:
        return int(arguments.get("num_processes", 2))

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def rank(self) -> int:
        return self.launched.rank if self.launched else 0

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0

    def check_runnable(self) -> None:
        if self.launched is not None and not dist.is_initialized():
            dist.init_process_group(
                "gloo",
                rank=self.launched.rank,
                world_size=self.launched.world_size,
                timeout=datetime.timedelta(seconds=60),
            )

    def parallel_strategy(self) -> ParallelStrategy:
        return AcmeStrategy(self)

    def prepare_model(self, model: Any) -> Any:
        self.model = torch.nn.parallel.DistributedDataParallel(model.to(self.device))
        return self.model

    def prepare_dataloader(self, loader: Any) -> Any:
        assert self.launched is not None
        sampler = DistributedSampler(
            loader.dataset, num_replicas=self.launched.world_size, rank=self.rank, seed=0
        )
        return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=sampler)

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        values = torch.tensor(list(sums.values()), dtype=torch.float64)
        dist.all_reduce(values)
        return dict(zip(sums, values.tolist(), strict=True))

    def close(self) -> None:
        report = {
            "rank": self.rank,
            "world_size": self.launched.world_size if self.launched else 1,
            "contexts": self.contexts,
            "weights": [float(p.double().sum()) for p in self.model.parameters()],
        }
        folder = os.environ["ACME_REPORT_DIR"]
        with open(os.path.join(folder, f"rank{self.rank}.json"), "w") as handle:
            json.dump(report, handle)
        dist.barrier()
        dist.destroy_process_group()
        exit_after_atexit_handlers("acme: gloo workers may abort in interpreter teardown")


@hookimpl
def plugtrain_register_backends(registry: Any) -> None:
    registry.register("AcmeCPU", "acme_backend:AcmeBackend", schema=AcmeArgs)
