"""The installed distributions' metadata read once, for tests that run the command line often.

Every ``plugtrain`` command scans the installed distributions (entry points, names, versions,
declared plugin APIs) when it starts: once per process for a user, but once per call for a test
that calls :func:`plugtrain.cli.main` a thousand times in one process, where that scan costs
about a third of a ``check``. Nothing is installed or removed while such a test runs, so
reading the metadata once gives every call the same answers.

Imported as ``support.installed`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

_METADATA = importlib.metadata.Distribution.metadata


def _metadata_once(self: importlib.metadata.Distribution) -> Any:
    """``Distribution.metadata``, parsed on the first read of this distribution object."""
    cached = self.__dict__.get("_metadata_read_once")
    if cached is None:
        cached = self.__dict__["_metadata_read_once"] = _METADATA.fget(self)  # type: ignore[attr-defined]
    return cached


@contextmanager
def metadata_read_once() -> Iterator[None]:
    """Within the block, entry points, distributions and their metadata are read once.

    ``importlib.metadata.entry_points`` and ``distribution`` answer from a cache keyed by
    their arguments (so ``version`` does too), and a distribution object parses its
    ``METADATA`` file on the first read only. Everything is restored on leaving.
    """
    with pytest.MonkeyPatch.context() as patch:
        entry_points = functools.cache(importlib.metadata.entry_points)
        distribution = functools.cache(importlib.metadata.distribution)
        patch.setattr(importlib.metadata, "entry_points", entry_points)
        patch.setattr(importlib.metadata, "distribution", distribution)
        patch.setattr(importlib.metadata.Distribution, "metadata", property(_metadata_once))
        yield
