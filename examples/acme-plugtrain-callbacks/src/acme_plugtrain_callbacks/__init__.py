"""acme-plugtrain-callbacks: ``LossEMA`` (a callback) and ``StdoutLogger`` (a logger)."""

from __future__ import annotations

__version__ = "0.1.0"
