"""Every optimizer of the distribution passes plugtrain's behavioural conformance kit."""

from __future__ import annotations

import pytest

import plugtrain
from plugtrain.testing import OPTIMIZER_PROPERTIES, check_optimizer, distribution_names

# Arguments for the optimizers that need some (the rest run on their defaults).
ARGUMENTS = {"SGD": {"lr": 0.1}, "Adafactor": {"lr": 0.01}}

# Properties that do not apply to a built-in, with the reason (none today).
OPT_OUTS: dict[str, dict[str, str]] = {}


@pytest.mark.parametrize("name", distribution_names("plugtrain-optimizers", "optimizer"))
def test_optimizer_conformance(name):
    report = check_optimizer(
        plugtrain.resolve("optimizer", name),
        ARGUMENTS.get(name, {}),
        skip=OPT_OUTS.get(name),
        name=name,
    )
    # every built-in offers both code paths, so none of the properties is left out but the
    # evaluation contract, which concerns only the optimizers with train()/eval()
    want = list(OPTIMIZER_PROPERTIES)
    if "ScheduleFree" not in name:
        want.remove("evaluation_modes")
    assert [r.name for r in report.results if r.outcome == "passed"] == want


@pytest.mark.parametrize("name", ["Muon", "Adafactor"])
def test_updates_beside_empty_matrices(name):
    # before the kit found it, Muon divided by the row count of a (0, n) matrix and Adafactor
    # by the RMS of an empty update (ZeroDivisionError)
    import torch

    optimizer = plugtrain.resolve("optimizer", name)
    weight = torch.ones(2, 3, requires_grad=True)
    empty = torch.zeros(0, 3, requires_grad=True)
    weight.grad, empty.grad = torch.ones(2, 3), torch.zeros(0, 3)
    optimizer([weight, empty], lr=0.1).step()
    assert not torch.equal(weight.detach(), torch.ones(2, 3))
    assert empty.shape == (0, 3)
