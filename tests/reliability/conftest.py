"""Fixtures of the reliability suite (its helpers are in ``support.reliability``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from plugtrain.discovery import loading as plugins


@pytest.fixture
def keep_registry() -> Iterator[None]:
    """Restore the process-wide plugin settings that in-process commands replace."""
    settings, extra = plugins.current_settings(), plugins.current_extra()
    yield
    plugins.reset(settings, extra=extra)
