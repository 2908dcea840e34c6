"""Creating backends by type, and the rule of one backend type per process (Cerebras' rule)."""

from __future__ import annotations

import threading
from typing import Any

from plugtrain.errors import BackendError

__all__ = ["active_backend_type", "backend", "claim_backend_type", "release_backend_type"]

_lock = threading.Lock()
_active: str | None = None


def claim_backend_type(backend_type: str) -> None:
    """Record that a backend of ``backend_type`` exists in this process.

    Backend constructors call this first.

    :raises BackendError: (a ``RuntimeError``) when a backend of another type already exists.
    """
    global _active  # noqa: PLW0603 - one backend type per process, by definition
    with _lock:
        if _active is not None and _active != backend_type:
            message = (
                "Cannot instantiate multiple backends. "
                f"A backend with type {_active} has already been instantiated."
            )
            raise BackendError(message)
        _active = backend_type


def active_backend_type() -> str | None:
    """The backend type instantiated in this process, if any."""
    return _active


def release_backend_type() -> None:
    """Forget the active backend type (for tests and for programs that tear down a backend)."""
    global _active  # noqa: PLW0603
    with _lock:
        _active = None


def backend(backend_type: str, **arguments: Any) -> Any:
    """Create a backend: ``plugtrain.backend("CSX", cluster_config=...)``.

    :param backend_type: ``"CPU"``, ``"GPU"``, ``"CSX"`` or any registered backend (any case).
    :param arguments: the backend's arguments (see ``plugtrain show CPU``).
    """
    from plugtrain import resolve

    return resolve("backend", backend_type)(**arguments)
