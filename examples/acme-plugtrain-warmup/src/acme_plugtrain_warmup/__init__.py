"""acme-plugtrain-warmup: two schedulers for plugtrain, and a template for scheduler authors.

``LinearWarmupLR`` derives from the core's scheduler base (:mod:`plugtrain.scheduler`) and has a
closed form; ``HalvingLR`` is a plain ``torch.optim.lr_scheduler.LRScheduler`` subclass without
one. Both nest in ``SequentialLR`` and ``ChainedLR``. Importing this package does not import
torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
