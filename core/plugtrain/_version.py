"""The versions of plugtrain and of the plugin contract it provides (imports nothing)."""

from __future__ import annotations

__all__ = ["PLUGIN_API_VERSION", "__version__"]

__version__ = "0.1.0"

PLUGIN_API_VERSION = "1.1"
"""Version of the plugin contract in :mod:`plugtrain.hookspecs` and :mod:`plugtrain.protocols`
(major changes break plugins; ``docs/plugin-api.md`` keeps the changelog)."""
