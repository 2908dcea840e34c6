"""Moved to the core: :class:`plugtrain.scheduler.Scheduler` (kept importable here).

The built-in schedulers derive from the core's base exactly as a third party's do.
"""

from __future__ import annotations

from plugtrain.scheduler import Scheduler

__all__ = ["Scheduler"]
