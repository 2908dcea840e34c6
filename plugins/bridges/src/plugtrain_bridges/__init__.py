"""plugtrain-bridges: the optimizers of ``torch.optim`` and ``pytorch-optimizer`` by name."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
