"""Creating backends by type; the rule of one backend type per process (Cerebras' rule).

The rule itself lives in the small core, :mod:`plugtrain.backend_base`, beside the backend base
class; these names are re-exported here.
"""

from __future__ import annotations

from typing import Any

from plugtrain.backend_base import active_backend_type, claim_backend_type, release_backend_type

__all__ = ["active_backend_type", "backend", "claim_backend_type", "release_backend_type"]


def backend(backend_type: str, **arguments: Any) -> Any:
    """Create a backend: ``plugtrain.backend("CSX", cluster_config=...)``.

    :param backend_type: ``"CPU"``, ``"GPU"``, ``"CSX"`` or any registered backend (any case).
    :param arguments: the backend's arguments (see ``plugtrain show CPU``).
    """
    from plugtrain.plugins import get_registry

    return get_registry().resolve("backend", backend_type)(**arguments)
