"""plugtrain-schedulers: the Cerebras Model Zoo learning-rate and weight-decay schedulers.

Use them by name (``plugtrain.resolve("scheduler", "LinearLR")``); importing this package does
not import torch. The closed-form curves live in :mod:`plugtrain_schedulers.curves` (torch-free).
"""

from __future__ import annotations

__version__ = "0.1.0"
