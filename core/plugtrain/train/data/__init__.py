"""The data a run reads, in the global sample order, from a stream that knows its place.

One permutation per epoch from ``(seed, epoch)``, torch loaders made to follow it, the data
stream an exact resume continues, and the seeds of every generator.
"""

from __future__ import annotations

from plugtrain.train.data.global_sampler import GlobalBatchSampler, in_global_order
from plugtrain.train.data.sample_order import GlobalOrder
from plugtrain.train.data.seeding import rng_state, seed_everything, set_rng_state
from plugtrain.train.data.stream import DataStream, batch_size, known_empty

__all__ = [
    "DataStream",
    "GlobalBatchSampler",
    "GlobalOrder",
    "batch_size",
    "in_global_order",
    "known_empty",
    "rng_state",
    "seed_everything",
    "set_rng_state",
]
