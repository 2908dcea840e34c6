"""Tests of acme-plugtrain-sparsity; they run once the distribution is installed, else skip."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("acme_plugtrain_sparsity", reason="acme-plugtrain-sparsity is not installed")

# imported after the skip, so that a missing plugin skips cleanly
from acme_plugtrain_sparsity.prune import RandomPrune

from plugtrain.protocols import SparsityAlgorithm
from plugtrain.testing import assert_plugin_contract, assert_plugin_installed, check_sparsity


def test_installed_and_meets_the_contract():
    assert_plugin_installed("acme-plugtrain-sparsity")
    assert_plugin_contract("acme-plugtrain-sparsity")


def test_random_prune_halves_the_kept_weights_down_to_the_floor():
    weight = torch.zeros(4, 4)
    prune = RandomPrune([("w", weight)], sparsity=0.8, every=2, rate=0.5)
    assert isinstance(prune, SparsityAlgorithm)
    generator = torch.Generator().manual_seed(0)
    masks = prune.initial_masks(generator)
    kept = []
    for _ in range(8):
        if prune.advance(True):
            masks = prune.update_masks(masks, None, generator)
        kept.append(int(masks["w"].sum()))
    assert kept == [16, 8, 8, 4, 4, 3, 3, 3]  # 3 = trunc(0.2 * 16): no pruning after
    assert prune.state_dict() == {"step": 8, "level": 1 - 3 / 16}


def test_random_prune_passes_the_conformance_kit():
    report = check_sparsity(RandomPrune, {"sparsity": 0.5, "every": 1})
    assert report.failures == []
