"""Fixtures of the reliability suite; also makes ``reliability_support`` importable."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from plugtrain import plugins

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def keep_registry() -> Iterator[None]:
    """Restore the process-wide plugin settings that in-process commands replace."""
    settings, extra = plugins.current_settings(), plugins.current_extra()
    yield
    plugins.reset(settings, extra=extra)
