"""A model a checkpoint will fill, built once: on ``meta``, never initialised, then loaded.

- :mod:`.building`: :func:`build_for_loading` builds it with empty storage, and :func:`adopt`
  lets it keep tensors read into memory of their own;
- :mod:`.filling`: :func:`fill_pending` gives what no checkpoint filled its initial values;
- :mod:`.bfloat16`: frozen weights held in bfloat16 where the checkpoint gives bfloat16 values
  (:func:`allow_bfloat16` marks them, :func:`hold_in_bfloat16` decides before a load).
"""

from __future__ import annotations

from plugtrain.conversion.meta_build.bfloat16 import (
    allow_bfloat16,
    bfloat16_base_enabled,
    bfloat16_names,
    hold_in_bfloat16,
)
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
    "allow_bfloat16",
    "bfloat16_base_enabled",
    "bfloat16_names",
    "build_for_loading",
    "continue_after_build",
    "covers",
    "fill_pending",
    "hold_in_bfloat16",
    "is_pending",
    "meta_build_enabled",
    "on_meta",
]
