"""acme-plugtrain-adan: the Adan optimizer for plugtrain, and a template for plugin authors.

Use it by name once installed: ``plugtrain.resolve("optimizer", "Adan")`` or, in a run file,
``optimizer: {Adan: {lr: 1.0e-3}}``. Importing this package does not import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
