"""Module attributes that resolve through the registry."""

from __future__ import annotations

from typing import Any

from plugtrain.errors import UnknownNameError

__all__ = ["resolve_attribute"]


class UnknownAttributeError(UnknownNameError, AttributeError):
    """A registry miss seen through a module attribute (so ``hasattr`` keeps working)."""


def resolve_attribute(module: str, kind: str, name: str) -> Any:
    """``plugtrain.resolve(kind, name)`` for ``module.<name>``; AttributeError when missing."""
    if name.startswith("__"):
        message = f"module {module!r} has no attribute {name!r}"
        raise AttributeError(message)
    from plugtrain.discovery.loading import get_registry

    try:
        return get_registry().resolve(kind, name)
    except UnknownNameError as exc:
        raise UnknownAttributeError(str(exc)) from None
