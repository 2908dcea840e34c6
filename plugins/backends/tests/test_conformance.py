"""Every backend of the distribution passes plugtrain's behavioural conformance kit."""

from __future__ import annotations

import pytest
import torch

import plugtrain
from plugtrain.testing import check_backend

pytestmark = pytest.mark.usefixtures("fresh_backend")

# Where a backend's device is absent here, its fit is skipped with the reason (never silently).
OPT_OUTS = {
    "CSX": {"fit": "needs cerebras.pytorch and a Cerebras cluster"},
    "GPU": {} if torch.cuda.is_available() else {"fit": "no CUDA device on this machine"},
}


@pytest.mark.parametrize("name", plugtrain.names("backend"))
def test_backend_conformance(name):
    report = check_backend(plugtrain.resolve("backend", name), skip=OPT_OUTS.get(name), name=name)
    assert report.outcome("protocol") == "passed"
