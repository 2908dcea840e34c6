"""The conformance kit over every built-in algorithm, and the distribution's contract."""

from __future__ import annotations

import pytest

from plugtrain.testing import SPARSITY_PROPERTIES, assert_plugin_contract, check_sparsity
from plugtrain_sparsity.gmp import GMP
from plugtrain_sparsity.rigl import RigL
from plugtrain_sparsity.set import SET
from plugtrain_sparsity.static import Static

LINEAR = {"type": "linear", "init": 0.25, "slope": 0.1}
CASES = {
    "Static": (Static, {"sparsity": 0.5}),
    "GMP": (GMP, {"sparsity": LINEAR, "update": {"freq": 2}, "init_method": "topk"}),
    "SET": (SET, {"sparsity": [0.5, 0.75], "drop_fraction": 0.5}),
    "RigL": (RigL, {"sparsity": 0.75, "balance_out_groups": 2, "update": {"steps": [0, 2, 5]}}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_algorithm_passes_the_kit(name):
    cls, arguments = CASES[name]
    report = check_sparsity(cls, arguments)
    assert [r.name for r in report.results] == list(SPARSITY_PROPERTIES)
    assert report.failures == []


def test_the_kit_catches_the_global_rng():
    class GlobalRandom(SET):
        def grow_score(self, param, gradient, generator):
            import torch

            return torch.rand(param.shape)

    report = check_sparsity(GlobalRandom, {"sparsity": 0.5}, raise_on_failure=False)
    assert report.outcome("generator_only") == "failed"
    assert report.outcome("checkpoint_resume") == "passed"  # the trainer restores the global RNG


def test_the_distribution_meets_the_contract():
    assert_plugin_contract("plugtrain-sparsity")
