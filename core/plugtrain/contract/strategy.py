"""The parallel strategy: how a backend runs one model over its processes (torch-free).

A backend owns its strategy; the Trainer's loop never branches on the kind of parallelism. It
asks the strategy to wrap the model once, for a context around each micro-batch's forward and
backward (``synchronize`` is true for the last micro-batch of an optimizer step only, so that a
data-parallel strategy reduces gradients once per step), to reduce metric sums over the
processes, how many processes a gradient synchronisation averages over, and whether this
process writes files.

A backend provides one through the optional member ``parallel_strategy()`` of
:class:`plugtrain.protocols.Backend`; without it, :func:`strategy_of` builds the default
:class:`ParallelStrategy` on the backend's own members (one process, or a backend that wraps
its model in ``prepare_model``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

__all__ = ["ParallelStrategy", "strategy_of"]


class ParallelStrategy:
    """The default strategy: what the backend's Backend-protocol members say, no sync control.

    Subclass it in a backend and override what differs (``micro_batch_context`` for DDP's
    ``no_sync``, ``wrap_model`` for FSDP ...).

    :param backend: the backend that owns it.
    """

    global_sample_order = False
    """Whether the backend's ``prepare_dataloader`` accepts a training loader that already
    follows the global sample order (its ``batch_sampler`` has ``sharded = True`` and yields
    this process's share) and leaves it as it is; only then does ``loop.sample_order: global``
    apply."""

    sharded_parameters = False
    """Whether each process holds a shard of every parameter (DTensors, as FSDP2 does), not the
    whole model: checkpoints gather or save shards, the NaN guard agrees over the processes, and
    optimizers must declare that they step sharded parameters."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def build_model(self, build: Any) -> Any:
        """The model from the Trainer's ``model`` callable: ``build()``, called once.

        A strategy may build it elsewhere (FSDP2 builds a model that declares ``init_weights()``
        on the ``meta`` device and fills each shard in :meth:`wrap_model`).
        """
        return build()

    def wrap_model(self, model: Any) -> Any:
        """The model placed for training: the backend's ``prepare_model``."""
        return self.backend.prepare_model(model)

    def unwrap_model(self, model: Any) -> Any:
        """The module that holds the weights (``.module`` of a wrapper, else the model)."""
        return getattr(model, "module", model)

    def micro_batch_context(self, model: Any, *, synchronize: bool) -> Any:
        """The context one micro-batch's forward and backward run in.

        :param model: the wrapped model.
        :param synchronize: whether this micro-batch is the last of its optimizer step, after
            which the gradients must be complete on every process.
        """
        return contextlib.nullcontext()

    def reduce_sums(self, sums: Mapping[str, float]) -> dict[str, float]:
        """Each value summed over every process: the backend's ``reduce_sums``."""
        return dict(self.backend.reduce_sums(sums))

    @property
    def rank(self) -> int:
        """The index of this process among the ``world_size`` ones (the backend's, else 0)."""
        return int(getattr(self.backend, "rank", 0))

    @property
    def world_size(self) -> int:
        """Processes whose gradients one synchronisation averages (the backend's, else 1).

        The loop's ``loss_averaging: global`` relies on the synchronised gradient being the
        mean over these processes (DDP's rule); a strategy that sums overrides this with 1.
        """
        return int(getattr(self.backend, "world_size", 1))

    @property
    def is_writer(self) -> bool:
        """Whether this process writes checkpoints, metrics and logs."""
        return bool(self.backend.is_main_process)


def strategy_of(backend: Any) -> ParallelStrategy:
    """The strategy of ``backend``: its ``parallel_strategy()``, else the default one."""
    make = getattr(backend, "parallel_strategy", None)
    if callable(make):
        return make()  # type: ignore[no-any-return]
    return ParallelStrategy(backend)
