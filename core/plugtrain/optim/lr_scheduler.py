"""``plugtrain.optim.lr_scheduler``: learning-rate schedulers resolved through the registry.

``plugtrain.optim.lr_scheduler.CosineDecayLR`` is
``plugtrain.resolve("scheduler", "CosineDecayLR")``.
"""

from __future__ import annotations

from typing import Any

from plugtrain.optim._resolve import resolve_attribute


def __getattr__(name: str) -> Any:
    return resolve_attribute(__name__, "scheduler", name)
