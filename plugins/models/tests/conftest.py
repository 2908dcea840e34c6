"""Shared set-up of plugtrain-models' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Run each test on one torch thread: the models are tiny, and several threads on a
    loaded machine spend their time waiting for each other (50x slower on 2 shared cores)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
