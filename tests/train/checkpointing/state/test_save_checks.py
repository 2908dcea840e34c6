"""Every save checks its state; an unloadable newest checkpoint is skipped (C07-C09).

Real Trainers writing real checkpoints; the components with bad states are Python-API objects.
"""

from __future__ import annotations

import fractions
import logging
import re
from typing import Any

import pytest
import torch
from support.reliability import small_data, small_trainer

from plugtrain.errors import CheckpointError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint


class Holder:
    """A callback whose state holds ``make()`` from step ``after`` on."""

    def __init__(self, make: Any, after: int = 0) -> None:
        self.make, self.after, self.step = make, after, 0

    def on_train_step_end(self, trainer: Any, metrics: Any) -> None:
        self.step = trainer.global_step

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.make() if self.step > self.after else 1}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


def test_c07_a_callback_state_holding_a_lambda_saves_the_step_without_it_and_names_it(tmp_path):
    model_dir = tmp_path / "run"
    trainer = small_trainer(model_dir, callbacks=[Holder(lambda: lambda x: x)])
    with pytest.raises(CheckpointError) as stopped:
        trainer.fit(small_data())
    path = model_dir / "checkpoint_5.mdl"
    assert re.fullmatch(
        rf"{re.escape(str(path))}: saved without the state of callbacks\[0\] \(\S+\.Holder: "
        r"it cannot be saved: \w+Error: .+\), which would not load with weights_only=True; "
        r"training stopped \(a resumed fit starts that callback fresh\)\. Keep only tensors, "
        r"numbers, strings, None and lists, tuples and dicts of them in state_dict\(\)\.",
        str(stopped.value),
    ), str(stopped.value)  # was: "internal error: PicklingError" and steps 1-5 lost
    state = load_checkpoint(path)
    assert state["global_step"] == 5
    assert state["callbacks"][0] is None
    resumed = small_trainer(model_dir)
    resumed.fit(small_data())
    assert resumed.loaded_step == 5


def test_c08_a_state_that_goes_bad_after_the_first_save_is_caught_at_its_save(tmp_path):
    model_dir = tmp_path / "callback"
    trainer = small_trainer(model_dir, callbacks=[Holder(lambda: fractions.Fraction(1, 3), 7)])
    with pytest.raises(CheckpointError, match=r"saved without the state of callbacks\[0\]"):
        trainer.fit(small_data())
    assert load_checkpoint(model_dir / "checkpoint_10.mdl")["callbacks"][0] is None
    # was: checkpoint_10 written with the Fraction, and no run could load it

    class OddScheduler(torch.optim.lr_scheduler.LambdaLR):
        """A scheduler that keeps a Fraction in its state from step 7 on."""

        def state_dict(self) -> dict[str, Any]:
            state = super().state_dict()
            if self.last_epoch > 7:
                state["odd"] = fractions.Fraction(1, 3)
            return state

    model_dir = tmp_path / "scheduler"
    trainer = small_trainer(
        model_dir, schedulers=[lambda optimizer: OddScheduler(optimizer, lambda step: 1.0)]
    )
    with pytest.raises(CheckpointError) as stopped:
        trainer.fit(small_data())
    assert str(stopped.value).startswith(
        "the checkpoint of step 10 was not written: schedulers[0] ("
    )
    assert (
        "would not load with weights_only=True, so no run could resume from it; training "
        f"stopped; the newest checkpoint is {model_dir / 'checkpoint_5.mdl'}."
    ) in str(stopped.value)
    assert sorted(p.name for p in model_dir.glob("checkpoint_*")) == ["checkpoint_5.mdl"]


def test_c09_an_unloadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog):
    model_dir = tmp_path / "run"
    small_trainer(model_dir, max_steps=10).fit(small_data())
    newest = model_dir / "checkpoint_10.mdl"
    state = load_checkpoint(newest)
    state["callbacks"] = [{"name": "Holder", "state": {"value": fractions.Fraction(1, 3)}}]
    save_checkpoint(newest, state)  # as an older plugtrain, which checked the first save only
    resumed = small_trainer(model_dir, max_steps=20)
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        resumed.fit(small_data())
    assert resumed.loaded_step == 5  # was: CheckpointError, the fit stopped
    assert any(
        f"skipping a bad checkpoint: {newest}: not a readable plugtrain checkpoint" in r.message
        and "trying the older checkpoint_5.mdl" in r.message
        for r in caplog.records
    ), caplog.text
