"""The global sample order: the same samples per optimizer step at any world size (torch-free).

One permutation per epoch, drawn from ``(seed, epoch)`` over the global sample index (the
identity when the loader does not shuffle). Optimizer step ``s`` of an epoch consumes the
permutation's entries ``[s*G, (s+1)*G)`` for the global batch
``G = per-process batch x processes x grad_accum_steps``; micro-batch ``m`` of process ``r``
takes the fixed slice starting at ``s*G + (m*processes + r) * batch``. An epoch is
``len(dataset) // G`` steps: the last ``len(dataset) % G`` entries of each epoch's permutation
are not used (with shuffling they are different samples every epoch), so that every step is
a whole global batch at any split.
"""

from __future__ import annotations

import dataclasses
import random

__all__ = ["GlobalOrder"]


@dataclasses.dataclass(frozen=True)
class GlobalOrder:
    """Which samples each process's micro-batches take, epoch by epoch.

    :ivar num_samples: samples in the dataset.
    :ivar batch_size: samples per micro-batch of one process.
    :ivar world_size: processes.
    :ivar grad_accum_steps: micro-batches per optimizer step.
    :ivar seed: the permutations' seed.
    :ivar shuffle: whether each epoch is a permutation (else the dataset's order).
    """

    num_samples: int
    batch_size: int
    world_size: int
    grad_accum_steps: int
    seed: int
    shuffle: bool

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over every process: ``G``."""
        return self.batch_size * self.world_size * self.grad_accum_steps

    @property
    def steps_per_epoch(self) -> int:
        """Whole optimizer steps in one pass over the dataset."""
        return self.num_samples // self.global_batch

    @property
    def batches_per_epoch(self) -> int:
        """Micro-batches one process takes in an epoch."""
        return self.steps_per_epoch * self.grad_accum_steps

    def permutation(self, epoch: int) -> list[int]:
        """The global order of ``epoch``: sample ids, the same on every process."""
        order = list(range(self.num_samples))
        if self.shuffle:
            random.Random(f"plugtrain-sample-order:{self.seed}:{epoch}").shuffle(order)
        return order

    def batch(self, order: list[int], rank: int, index: int) -> list[int]:
        """Micro-batch ``index`` of the epoch (counted over its steps) of process ``rank``."""
        start = (index * self.world_size + rank) * self.batch_size
        return order[start : start + self.batch_size]

    def step_samples(self, epoch: int, step: int) -> list[int]:
        """The sample ids optimizer step ``step`` of ``epoch`` consumes over every process."""
        start = step * self.global_batch
        return self.permutation(epoch)[start : start + self.global_batch]
