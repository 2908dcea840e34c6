"""Agreement between ranks: every process resumes from the same checkpoint, or none does."""

from __future__ import annotations

from plugtrain.train.checkpointing.ranks.agreement import (
    AgreeingTrainer,
    disagreement,
    restore_agreed,
)

__all__ = ["AgreeingTrainer", "disagreement", "restore_agreed"]
