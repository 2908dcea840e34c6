"""The core's own models and data loaders pass plugtrain's behavioural conformance kit."""

from __future__ import annotations

import pytest
import torch

import plugtrain
from plugtrain.testing import check_dataloader, check_model

MODELS = {
    "MLP": ({"in_features": 64, "out_features": 10, "depth": 2, "layer_norm": True}, (5, 64)),
}
DATALOADERS = {
    "Digits": {"batch_size": 64},
    "StdlibText": {"batch_size": 8, "block_size": 16, "max_bytes": 4000},
    "Synthetic": {"batch_size": 16, "num_examples": 100},
}


def _inputs(shape: tuple[int, ...]) -> object:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _builtin(kind: str) -> list[str]:
    """The names the core's own plugin registers (installed plugins add others)."""
    components = plugtrain.get_registry().components(kind)
    return sorted(c.name for c in components if c.plugin.name == "builtin")


def test_every_builtin_component_is_checked():
    assert sorted(MODELS) == _builtin("model")
    assert sorted(DATALOADERS) == _builtin("dataloader")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_conformance(name):
    arguments, shape = MODELS[name]
    inputs = _inputs(shape)
    check_model(plugtrain.resolve("model", name), arguments, inputs=inputs, name=name)


@pytest.mark.parametrize("name", sorted(DATALOADERS))
def test_dataloader_conformance(name):
    report = check_dataloader(plugtrain.resolve("dataloader", name), DATALOADERS[name], name=name)
    assert report.outcome("length") == "passed"
