"""Which plugin API a distribution is written for, read from its metadata before any import.

A plugin distribution declares the version of plugtrain's plugin API (the hooks of
:mod:`plugtrain.hookspecs` and what they receive) that it was written against, as an entry point
in the group ``plugtrain.api`` whose *name* is that version::

    [project.entry-points."plugtrain.api"]
    "1.0" = "acme_plugtrain_adan.plugin"

The API is versioned like semver: ``"1.2"`` means "any 1.x from 1.2 on" (``>=1.2,<2``); a
distribution that works with two major versions declares one entry for each. The value names the
plugin module the declaration is about; it is never imported (entry-point values must look like
an import path, which is why the version is the name). A distribution without a declaration
loads as before, so plugins written before the API was versioned keep working.

:func:`incompatibility` is called by the loader for each installed plugin before importing it.
"""

from __future__ import annotations

import importlib.metadata
import re

__all__ = [
    "API_GROUP",
    "FIRST_RELEASE",
    "compatible",
    "core_requirement",
    "declared_api",
    "incompatibility",
    "parse_api_version",
    "supported_range",
]

API_GROUP = "plugtrain.api"
"""The entry-point group whose names are the plugin API versions a distribution supports."""

FIRST_RELEASE: dict[str, str] = {"1.0": "0.1", "1.1": "0.1"}
"""The first plugtrain release providing each plugin API minor version.

A plugin declaring API ``V`` requires ``plugtrain>=FIRST_RELEASE[V]`` and no upper bound: the
declaration itself bounds the core from above, checked before the plugin is imported
(:func:`core_requirement`). Each release that adds an API minor adds a row.
"""

_VERSION = re.compile(r"^\s*(\d+)(?:\.(\d+))?\s*$")


def parse_api_version(text: str) -> tuple[int, int]:
    """``"1.2"`` -> ``(1, 2)``; ``"1"`` means ``1.0``.

    :raises ValueError: for anything but ``MAJOR`` or ``MAJOR.MINOR``.
    """
    match = _VERSION.match(text)
    if match is None:
        message = f"not a plugin API version (MAJOR.MINOR, such as '1.0'): {text!r}"
        raise ValueError(message)
    return int(match[1]), int(match[2] or 0)


def supported_range(declared: str) -> str:
    """The versions a declaration accepts, as a specifier: ``"1.2"`` -> ``">=1.2,<2"``."""
    major, minor = parse_api_version(declared)
    return f">={major}.{minor},<{major + 1}"


def compatible(declared: str, provided: str) -> bool:
    """Whether a plugin written for API ``declared`` works with a core providing ``provided``."""
    (want_major, want_minor), (have_major, have_minor) = (
        parse_api_version(declared),
        parse_api_version(provided),
    )
    return want_major == have_major and have_minor >= want_minor


def declared_api(distribution: importlib.metadata.Distribution) -> list[str]:
    """The API versions ``distribution`` declares (entry-point names of :data:`API_GROUP`)."""
    return sorted({ep.name for ep in distribution.entry_points.select(group=API_GROUP)})


def incompatibility(
    distribution: importlib.metadata.Distribution, provided: str | None = None
) -> str | None:
    """Why ``distribution``'s plugins must not be loaded by this plugtrain, or ``None``.

    Reads metadata only; nothing of the distribution is imported.

    :param provided: the core's plugin API version; default :data:`plugtrain.PLUGIN_API_VERSION`.
    :returns: a message naming both versions, or ``None`` when compatible or undeclared.
    """
    from plugtrain._version import PLUGIN_API_VERSION, __version__

    provided = provided or PLUGIN_API_VERSION
    declared = declared_api(distribution)
    if not declared:
        return None
    malformed = [d for d in declared if _VERSION.match(d) is None]
    if malformed:
        return (
            f"declares a malformed plugin API version {malformed[0]!r} in the entry-point "
            f"group {API_GROUP!r} (write MAJOR.MINOR, such as '1.0'); "
            f"this plugtrain {__version__} provides plugin API {provided}"
        )
    if any(compatible(d, provided) for d in declared):
        return None
    ranges = " or ".join(supported_range(d) for d in declared)
    newest = max(declared, key=parse_api_version)
    if parse_api_version(newest) < parse_api_version(provided):
        advice = f"upgrade it to a release made for plugin API {_major(provided)}.x"
    else:
        advice = f"upgrade plugtrain to a release providing plugin API {newest}"
    return (
        f"incompatible plugin API: it supports plugtrain plugin API {ranges}, "
        f"but this plugtrain {__version__} provides plugin API {provided}; {advice}"
    )


def _major(version: str) -> int:
    return parse_api_version(version)[0]


def core_requirement(declared: str) -> str:
    """The requirement on the core for a plugin declaring API ``declared``: ``"plugtrain>=0.1"``.

    The oldest core it allows is the first release providing that API; the newest is any
    release whose API is compatible (the declaration is checked when plugins are loaded). A
    distribution declaring several versions requires the core of the oldest one.

    :raises ValueError: for a version no plugtrain release provides.
    """
    major, minor = parse_api_version(declared)
    key = f"{major}.{minor}"
    if key not in FIRST_RELEASE:
        known = ", ".join(FIRST_RELEASE)
        message = f"no plugtrain release provides plugin API {declared} (known: {known})"
        raise ValueError(message)
    return f"plugtrain>={FIRST_RELEASE[key]}"
