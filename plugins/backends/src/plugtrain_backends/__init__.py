"""plugtrain-backends: the CPU, GPU and CSX backends.

Use them by name (``device: CPU`` or ``plugtrain.backend("CPU")``); importing this package does
not import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"
