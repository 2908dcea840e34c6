"""Schemas of ``trainer.init``'s speed options (torch-free): compile, checkpointing, profile."""

from __future__ import annotations

import attrs

from plugtrain.registry.schema import arg

__all__ = ["ACTIVATION_CHECKPOINTING", "COMPILE", "ProfileSettings"]

COMPILE = ("off", "regional", "full")
"""``compile``: none, each repeated block of the model, or the whole model."""

ACTIVATION_CHECKPOINTING = ("off", "full", "selective")
"""``activation_checkpointing``: none, every repeated block, or every block by op policy."""


@attrs.frozen
class ProfileSettings:
    """A torch.profiler window: a Chrome trace (and memory) of some training steps."""

    start_step: int = arg(help="the first global step profiled", gt=0)
    steps: int = arg(1, help="how many steps are profiled", gt=0)
    memory: bool = arg(
        False,
        help="record memory: allocations in the trace, and on CUDA a memory snapshot "
        "(torch.cuda.memory._snapshot) of the window",
    )
