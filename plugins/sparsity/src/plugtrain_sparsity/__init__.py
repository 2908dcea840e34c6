"""plugtrain-sparsity: Model Zoo's weight sparsity algorithms as plugtrain components.

Use them in a run file's ``trainer.init.sparsity`` (``algorithm: rigl``), or from Python
(``Trainer(sparsity={"algorithm": "rigl", ...})``); importing this package does not import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
