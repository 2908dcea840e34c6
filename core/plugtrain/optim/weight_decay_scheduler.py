"""``plugtrain.optim.weight_decay_scheduler``: weight-decay schedulers, resolved by name.

``plugtrain.optim.weight_decay_scheduler.CosineDecayWD`` is
``plugtrain.resolve("scheduler", "CosineDecayWD")``.
"""

from __future__ import annotations

from typing import Any

from plugtrain.optim._resolve import resolve_attribute


def __getattr__(name: str) -> Any:
    return resolve_attribute(__name__, "scheduler", name)
