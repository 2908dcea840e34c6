"""Every callback and logger of the distribution passes plugtrain's behavioural conformance kit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import plugtrain
from plugtrain.testing import CALLBACK_PROPERTIES, LOGGER_PROPERTIES, check_callback, check_logger

CALLBACK_ARGUMENTS: dict[str, dict[str, Any]] = {
    "LogOptimizerParamGroup": {"keys": "lr"},
    "LoadCheckpointStates": {"load_checkpoint_states": "all"},
    "KeepNCheckpoints": {"n": 2},
    "GlobalFlags": {"csx.performance.micro_batch_size": 8},
    "ScopedTrainFlags": {"csx.performance.micro_batch_size": 8},
    "ScopedValidateFlags": {"csx.performance.micro_batch_size": 8},
}


def _logger_arguments(name: str, folder: Path) -> dict[str, Any]:
    return {
        "TensorBoardLogger": {"summary_dir": str(folder / "events")},
        "WandbLogger": {"project": "conformance"},
        "MLflowLogger": {"tracking_uri": (folder / "mlruns").as_uri()},
    }.get(name, {})


OWN_CALLBACKS = [
    name
    for name in plugtrain.names("callback")
    if plugtrain.describe("callback", name).distribution in ("plugtrain", "plugtrain-callbacks")
]
"""This distribution's callbacks and the core's (the others' are checked by their own tests)."""


@pytest.mark.parametrize("name", OWN_CALLBACKS)
def test_callback_conformance(name, fresh_backend):
    report = check_callback(
        plugtrain.resolve("callback", name), CALLBACK_ARGUMENTS.get(name, {}), name=name
    )
    outcomes = {r.name: r.outcome for r in report.results}
    assert set(outcomes) == set(CALLBACK_PROPERTIES)
    assert outcomes["hooks_in_order"] == "passed"
    assert "failed" not in outcomes.values()


@pytest.mark.parametrize("name", plugtrain.names("logger"))
def test_logger_conformance(name, tmp_path, monkeypatch, fresh_backend):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    report = check_logger(
        plugtrain.resolve("logger", name), _logger_arguments(name, tmp_path), name=name
    )
    outcomes = {r.name: r.outcome for r in report.results}
    assert set(outcomes) == set(LOGGER_PROPERTIES)
    assert outcomes["log_metrics_calls"] == "passed"
    assert outcomes["through_trainer"] == "passed"
