"""Hook implementations of acme-plugtrain-adan (entry point ``adan``).

This module is imported whenever plugtrain builds its registry (``plugtrain list`` included), so
it holds hookimpls only and imports neither torch nor :mod:`acme_plugtrain_adan.adan`: the
optimizer is named by an import string and imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from acme_plugtrain_adan import schemas
from plugtrain import hookimpl

if TYPE_CHECKING:
    from plugtrain.registry import ComponentRegistrar


@hookimpl
def plugtrain_register_optimizers(registry: ComponentRegistrar) -> None:
    """Register ``Adan``."""
    registry.register("Adan", "acme_plugtrain_adan.adan:Adan", schema=schemas.AdanArgs)
