"""Tests of acme-plugtrain-callbacks; they run once the distribution is installed, else skip."""

from __future__ import annotations

import pytest

pytest.importorskip("acme_plugtrain_callbacks", reason="acme-plugtrain-callbacks is not installed")

# imported after the skip, so that a missing plugin skips cleanly
from acme_plugtrain_callbacks.ema import LossEMA
from acme_plugtrain_callbacks.stdout import StdoutLogger

from plugtrain.errors import ConfigError
from plugtrain.testing import (
    assert_plugin_contract,
    assert_plugin_installed,
    check_callback,
    check_logger,
)


def test_installed_and_meets_the_contract():
    assert_plugin_installed("acme-plugtrain-callbacks")
    assert_plugin_contract("acme-plugtrain-callbacks")


def test_loss_ema_and_its_state():
    ema = LossEMA(decay=0.5)
    records = [{"loss": 4.0}, {"loss": 2.0}]
    for record in records:
        ema.on_train_step_end(None, record)
    assert [r["loss_ema"] for r in records] == [4.0, 3.0]
    again = LossEMA(decay=0.5)
    again.load_state_dict(ema.state_dict())
    record = {"loss": 1.0}
    again.on_train_step_end(None, record)
    assert record["loss_ema"] == 2.0
    with pytest.raises(ConfigError, match="decay: must be < 1"):
        LossEMA(decay=1.0)


def test_stdout_logger(capsys):
    logger = StdoutLogger(prefix="x", digits=2)
    logger.log_metrics(3, "val", {"loss": 0.5})
    logger.close()
    assert capsys.readouterr().out == "x step 3 val loss=0.50\nx closed after 1 records\n"


def test_loss_ema_passes_the_conformance_kit():
    report = check_callback(LossEMA, {"decay": 0.5})
    assert {r.name: r.outcome for r in report.results} == {
        "hooks_in_order": "passed",
        "state_round_trip": "passed",
        "checkpoint_resume": "passed",
    }


def test_stdout_logger_passes_the_conformance_kit(capsys):
    report = check_logger(StdoutLogger, {"prefix": "kit"})
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes["log_metrics_calls"] == "passed"
    assert outcomes["through_trainer"] == "passed"
    assert "kit" in capsys.readouterr().out
