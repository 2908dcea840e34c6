"""Argument schemas (torch-free: ``plugtrain check`` reads them)."""

from __future__ import annotations

import attrs

from plugtrain.schema import arg


@attrs.frozen
class RandomPruneArgs:
    """Gradual random pruning: dense at first, a share of the kept weights pruned every N steps."""

    sparsity: float = arg(help="the final fraction of zeros per parameter", ge=0, lt=1)
    every: int = arg(10, help="optimizer steps between two prunings", ge=1)
    rate: float = arg(0.5, help="fraction of the kept weights each pruning removes", gt=0, lt=1)
