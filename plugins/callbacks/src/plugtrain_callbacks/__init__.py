"""plugtrain-callbacks: Model Zoo's callbacks and loggers as plugtrain components.

Use them by name in a run file (``callbacks: [{ComputeNorm: {}}]``, ``loggers:
[{TensorBoardLogger: {}}]``) or as objects (``Trainer(callbacks=[ComputeNorm()])``); importing
this package does not import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
