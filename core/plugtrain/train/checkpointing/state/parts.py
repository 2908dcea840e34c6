"""The parts of a checkpoint that a callback may choose not to restore.

:meth:`plugtrain.protocols.Callback.on_before_load_checkpoint` sees a checkpoint as these parts,
under Model Zoo's names; a part it deletes is not restored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PARTS", "checkpoint_parts"]

PARTS: dict[str, str] = {
    "model": "model",
    "optimizer": "optimizer",
    "schedulers": "schedulers",
    "grad_scaler": "grad_scaler",
    "global_step": "global_step",
    "dataloader": "data",
    "callbacks": "callbacks",
    "sparsity": "sparsity",
}
"""Each part's name, and the key that holds it in a checkpoint file."""


def checkpoint_parts(state: Mapping[str, Any]) -> dict[str, Any]:
    """The parts present in a loaded checkpoint, by part name."""
    return {part: state[key] for part, key in PARTS.items() if key in state}
