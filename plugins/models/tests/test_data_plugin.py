"""The data half of plugtrain-models as a plugin: installed, sound, torch-free to list."""

from __future__ import annotations

import plugtrain
from plugtrain.shipped import shipped_by
from plugtrain.testing import assert_plugin_contract


def test_the_two_processors_are_registered_by_gpt_data() -> None:
    names = plugtrain.names("dataloader")
    assert {"GptHDF5MapDataProcessor", "GptHDF5DataProcessor"} <= set(names)
    for name in ("GptHDF5MapDataProcessor", "GptHDF5DataProcessor"):
        assert shipped_by("dataloader", name) == ["plugtrain-models"]


def test_gpt_data_keeps_the_plugin_contract() -> None:
    """Schemas match the factories' signatures; the plugin and schema modules need no torch."""
    assert_plugin_contract("gpt_data")
