"""The data half of plugtrain-models as a plugin: installed, sound, torch-free to list."""

from __future__ import annotations

from typing import Any

import pytest

import plugtrain
from plugtrain.registry.shipped import shipped_by
from plugtrain.testing import assert_plugin_contract


def test_the_two_processors_are_registered_by_gpt_data() -> None:
    names = plugtrain.names("dataloader")
    assert {"GptHDF5MapDataProcessor", "GptHDF5DataProcessor"} <= set(names)
    for name in ("GptHDF5MapDataProcessor", "GptHDF5DataProcessor"):
        assert shipped_by("dataloader", name) == ["plugtrain-models"]


def test_gpt_data_keeps_the_plugin_contract() -> None:
    """Schemas match the factories' signatures; the plugin and schema modules need no torch."""
    assert_plugin_contract("gpt_data")


def test_the_editor_schema_takes_both_spellings_of_a_data_section() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from plugtrain.authoring.jsonschema import run_file_schema
    from plugtrain.discovery import loading as plugins

    validator = jsonschema.Draft202012Validator(run_file_schema(plugins.get_registry()))
    arguments = {"data_dir": "d", "batch_size": 8, "shuffle": True, "vocab_size": 50257}
    run: dict[str, Any] = {
        "trainer": {
            "init": {
                "model": {"MLP": {"in_features": 4, "out_features": 2}},
                "optimizer": {"SGD": {"lr": 0.1}},
                "loop": {"max_steps": 1},
            },
            "fit": {"train_dataloader": {"data_processor": "GptHDF5MapDataProcessor", **arguments}},
        }
    }
    assert list(validator.iter_errors(run)) == []
    fit = run["trainer"]["fit"]
    fit["train_dataloader"] = {"GptHDF5MapDataProcessor": arguments}
    assert list(validator.iter_errors(run)) == []
    wrongs = [
        {"data_processor": "GptHDF5MapDataProcessor", "bogus": 1, **arguments},
        {"data_processor": "NoSuchLoader", **arguments},
        {"data_processor": "GptHDF5DataProcessor", "data_dir": "d", "batch_size": 8},  # no shuffle
    ]
    for wrong in wrongs:
        fit["train_dataloader"] = wrong
        assert list(validator.iter_errors(run)), wrong


def test_show_gives_the_model_zoo_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    from plugtrain.cli import main

    assert main(["show", "GptHDF5MapDataProcessor"]) == 0
    written = "{GptHDF5MapDataProcessor: {...}} or {data_processor: GptHDF5MapDataProcessor, ...}"
    assert f"written: {written}" in capsys.readouterr().out
