"""What the CPU and GPU backends share: their place in a data-parallel run (torch-free import)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from plugtrain.backend_base import BackendBase
from plugtrain.strategy import ParallelStrategy

__all__ = ["DataParallelBackend", "DataParallelStrategy", "FSDPStrategy", "report_csx_only"]

log = logging.getLogger("plugtrain")


class DataParallelStrategy(ParallelStrategy):
    """DDP: gradients are all-reduced once per optimizer step, on its last micro-batch.

    The micro-batches before the last run under ``DistributedDataParallel.no_sync()``, which
    keeps their gradients local (accumulated in ``.grad``); the last one's backward reduces
    the sum in one pass over the buckets.
    """

    global_sample_order = True  # shard_train_loader leaves a sharded batch sampler alone

    def micro_batch_context(self, model: Any, *, synchronize: bool) -> Any:
        """``model.no_sync()`` before the last micro-batch of a step in a distributed run."""
        no_sync = getattr(model, "no_sync", None)
        if synchronize or no_sync is None or self.backend.world_size == 1:
            return super().micro_batch_context(model, synchronize=synchronize)
        return no_sync()


class FSDPStrategy(DataParallelStrategy):
    """FSDP2 (``data_parallel: fsdp2``) or HSDP (``hsdp``): ``fully_shard`` on a device mesh.

    Parameters, gradients and optimizer state are sharded over the ``dp_shard`` processes
    (replicated ``dp_replicate`` times under HSDP); the micro-batches before the last of a
    step skip the gradient reduce-scatter (``set_requires_gradient_sync(False)``). The model is
    sharded in place, so :meth:`unwrap_model` is the model itself, its parameters DTensors.
    A single process trains the model unsharded.
    """

    sharded_parameters = True
    """The parameters are DTensors: state dicts gather or shard them (see TrainerState)."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.mesh: Any = None
        """The device mesh (``None`` until :meth:`wrap_model`, and in a single process)."""
        self.built_on_meta = False
        """Whether :meth:`build_model` built the model on ``meta`` (filled per shard later)."""

    def build_model(self, build: Any) -> Any:
        """On the ``meta`` device when the model declares ``init_weights()`` (see the module).

        Only in a sharded run (more than one process) with ``meta_device_init`` on; a model
        without ``init_weights()`` is built again, whole (a meta build costs no memory and
        draws no random numbers).
        """
        if self.backend.world_size == 1 or not getattr(self.backend, "meta_device_init", True):
            return build()
        import torch

        from plugtrain_backends import _meta_init

        with torch.device("meta"):
            model = build()
        if not _meta_init.can_build_on_meta(model):
            log.info(
                "%s has no init_weights(): built whole in every process, then sharded",
                type(model).__name__,
            )
            return build()
        self.built_on_meta = True
        return model

    def wrap_model(self, model: Any) -> Any:
        """The model on the backend's device, sharded with ``fully_shard`` on the run's mesh.

        A model built on ``meta`` is sharded there, then each process fills its own shards
        (:func:`plugtrain_backends._meta_init.materialise`).
        """
        from plugtrain_backends import _fsdp, _meta_init

        self.backend.check_runnable()
        on_meta = _meta_init.built_on_meta(model)
        if not on_meta:
            model = model.to(self.backend.device)
        if self.backend.world_size == 1:
            return model
        if self.backend.device.type == "cpu":
            _fsdp.pin_mmap_threshold()
        mesh = _fsdp.own_mesh(model)
        if mesh is not None:  # the model applied fully_shard to itself: keep its sharding
            log.info("%s is sharded already (fully_shard): kept as it is", type(model).__name__)
            self.mesh = mesh
            return model
        plan = _fsdp.FSDPPlan.of_backend(self.backend)
        shape = plan.mesh_shape(self.backend.world_size)
        self.mesh = _fsdp.build_mesh(self.backend.device.type, shape)
        policy = _fsdp.mixed_precision(getattr(self.backend, "half_type", None))
        model = _fsdp.shard_model(model, self.mesh, plan, policy)
        if on_meta:
            _meta_init.materialise(model, self.backend.device)
        return model

    def unwrap_model(self, model: Any) -> Any:
        """The model itself: ``fully_shard`` changes it in place."""
        return model

    def micro_batch_context(self, model: Any, *, synchronize: bool) -> Any:
        """Reduce-scatter the gradients on the last micro-batch of a step only."""
        from plugtrain_backends import _fsdp

        _fsdp.set_gradient_sync(model, synchronize)
        return super(DataParallelStrategy, self).micro_batch_context(model, synchronize=synchronize)


_REPORTED_CSX_ONLY: set[tuple[str, str]] = set()


def report_csx_only(backend_type: str, key: str) -> None:
    """Warn, once per process, backend type and key, that a CSX-only backend key does nothing.

    A Model Zoo file written for CS-X and run here with ``--set
    trainer.init.backend.backend_type=CPU`` keeps its ``cluster_config``.
    """
    if (backend_type, key) in _REPORTED_CSX_ONLY:
        return
    _REPORTED_CSX_ONLY.add((backend_type, key))
    log.warning(
        "backend: %s only acts on the CSX backend; on %s it has no effect", key, backend_type
    )


class DataParallelBackend(BackendBase):
    """Backend hooks for data parallel training; subclasses set the device and process group.

    The Trainer calls ``check_runnable`` (which joins the process group), ``prepare_model``,
    ``prepare_dataloader``, ``prepare_eval_dataloader`` and ``reduce_sums``; checkpoints and
    metrics are written where ``is_main_process`` is true.
    """

    main_process_id = 0
    _group: Any = None

    def configure(self, arguments: Mapping[str, Any]) -> None:
        """Take the arguments; a CSX ``cluster_config`` is said, once, to have no effect."""
        super().configure(arguments)
        if arguments.get("cluster_config") is not None:
            report_csx_only(self.backend_type, "cluster_config")

    def _make_group(self) -> Any:
        raise NotImplementedError

    @property
    def group(self) -> Any:
        """The :class:`~plugtrain_backends._parallel.ProcessGroup` of this process."""
        if self._group is None:
            self._group = self._make_group()
        return self._group

    @property
    def rank(self) -> int:
        """The global rank of this process (0 when it runs alone)."""
        return int(self.group.rank)

    @property
    def world_size(self) -> int:
        """Number of processes in the run (1 when it runs alone)."""
        return int(self.group.world_size)

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints and metrics."""
        return self.rank == self.main_process_id

    def _join(self, **options: Any) -> None:
        self.group.join(**options)
        if not self.is_main_process:
            # Only the main process logs progress; the others report warnings and errors.
            logging.getLogger("plugtrain").setLevel(logging.WARNING)

    def parallel_strategy(self) -> DataParallelStrategy:
        """DDP with one sync per optimizer step, or FSDP2/HSDP as ``data_parallel`` says."""
        if getattr(self, "data_parallel", "ddp") in ("fsdp2", "hsdp"):
            return FSDPStrategy(self)
        return DataParallelStrategy(self)

    @staticmethod
    def deep_check(
        arguments: Mapping[str, Any], make_model: Any, make_optimizer: Any, world_size: int
    ) -> Any:
        """``plugtrain check --deep``: the model sharded on a fake process group.

        See :func:`plugtrain_backends._fsdp.deep_check`; ``None`` under DDP.
        """
        if arguments.get("data_parallel", "ddp") == "ddp":
            return None
        from plugtrain_backends import _fsdp

        plan = _fsdp.FSDPPlan(
            arguments.get("data_parallel", "ddp"),
            arguments.get("dp_shard"),
            arguments.get("dp_replicate", 1),
            arguments.get("reshard_after_forward", True),
            arguments.get("fsdp_modules") or (),
        )
        return _fsdp.deep_check(plan, make_model, make_optimizer, world_size)

    def configure_precision(self, settings: Any) -> None:
        """Keep the half type for FSDP2's mixed-precision policy; then the default."""
        self.half_type = settings.half_type(False)
        super().configure_precision(settings)

    def close(self) -> None:
        """Leave the process group together with the other processes (end of a run)."""
        if self._group is not None:
            self._group.leave()

    def prepare_dataloader(self, loader: Any) -> Any:
        """The training data, sharded over the processes of a data-parallel run."""
        if self.world_size == 1:
            return loader
        from plugtrain_backends._parallel import shard_train_loader

        return shard_train_loader(loader, self.rank, self.world_size)

    def prepare_eval_dataloader(self, loader: Iterable[Any], max_batches: int | None) -> Any:
        """The share of this process in the first ``max_batches`` evaluation batches."""
        from plugtrain_backends._parallel import shard_eval_batches

        return shard_eval_batches(loader, self.rank, self.world_size, max_batches)

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Evaluation sums added up over every process."""
        return self.group.reduce_sums(sums)  # type: ignore[no-any-return]
