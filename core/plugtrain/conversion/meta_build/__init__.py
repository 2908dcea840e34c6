"""A model a checkpoint will fill, built once: on ``meta``, never initialised, then loaded.

- :mod:`.building`: :func:`build_for_loading` builds it with empty storage, and :func:`adopt`
  lets it keep tensors read into memory of their own;
- :mod:`.filling`: :func:`fill_pending` gives what no checkpoint filled its initial values.
"""

from __future__ import annotations

from plugtrain.conversion.meta_build.building import (
    adopt,
    build_for_loading,
    continue_after_build,
    covers,
    is_pending,
    meta_build_enabled,
    on_meta,
)
from plugtrain.conversion.meta_build.filling import fill_pending

__all__ = [
    "adopt",
    "build_for_loading",
    "continue_after_build",
    "covers",
    "fill_pending",
    "is_pending",
    "meta_build_enabled",
    "on_meta",
]
