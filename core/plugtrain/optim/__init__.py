"""``plugtrain.optim`` mirrors ``cerebras.pytorch.optim``: optimizers resolved by the registry.

``plugtrain.optim.SGD`` is ``plugtrain.resolve("optimizer", "SGD")``; the scheduler submodules
``lr_scheduler`` and ``weight_decay_scheduler`` resolve schedulers the same way.
"""

from __future__ import annotations

from typing import Any

from plugtrain.optim import lr_scheduler, weight_decay_scheduler
from plugtrain.optim._resolve import resolve_attribute

__all__ = ["lr_scheduler", "weight_decay_scheduler"]


def __getattr__(name: str) -> Any:
    return resolve_attribute(__name__, "optimizer", name)


def __dir__() -> list[str]:
    from plugtrain.discovery.loading import get_registry

    return sorted([*__all__, *get_registry().names("optimizer")])
