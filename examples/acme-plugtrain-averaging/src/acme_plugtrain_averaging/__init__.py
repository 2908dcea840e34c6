"""acme-plugtrain-averaging: Schedule-Free SGD, a weight EMA and a weight-decay ramp."""

from __future__ import annotations

__version__ = "0.1.0"
