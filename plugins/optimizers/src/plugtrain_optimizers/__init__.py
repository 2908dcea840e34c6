"""plugtrain-optimizers: the Cerebras Model Zoo optimizers with cstorch 2.10 numerics.

Use them by name (``plugtrain.resolve("optimizer", "SGD")`` or ``optimizer: {SGD: {lr: 0.1}}``);
importing this package does not import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
