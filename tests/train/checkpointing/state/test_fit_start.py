"""Which checkpoint a fit starts from: a starting point begins a run, its checkpoints resume it."""

from __future__ import annotations

import contextlib
import logging

import pytest
import torch

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.errors import CheckpointError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint
from plugtrain.train.distributed import TrainingInterrupted
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _trainer(model_dir, max_steps, **changes):
    sgd = plugtrain.resolve("optimizer", "SGD")
    arguments = {
        "device": "CPU",
        "model_dir": model_dir,
        "model": lambda: MLP(in_features=16, out_features=4, hidden=32),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.05, momentum=0.9),
        "loop": {"max_steps": max_steps},
        "checkpoint": {"steps": 4},
        "logging": {"log_steps": 4},
        "seed": 3,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def _data():
    return synthetic_loader(batch_size=8, num_examples=64, in_features=16, num_classes=4)


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


@pytest.fixture
def starting_point(tmp_path):
    """A weights-only checkpoint, as a converted or published model is: step 0, no optimizer."""
    pretrained = _trainer(tmp_path / "pretrain", 3)
    pretrained.fit(_data())
    path = tmp_path / "base.mdl"
    save_checkpoint(path, {"model": pretrained.model.state_dict()})
    return path


def test_the_same_command_with_a_starting_point_resumes_the_run(tmp_path, starting_point, caplog):
    straight = _trainer(tmp_path / "a", 12)
    straight.fit(_data(), ckpt_path=starting_point)
    first = _trainer(tmp_path / "b", 6)
    first.fit(_data(), ckpt_path=starting_point)  # stops at 6 as an interrupted run does
    again = _trainer(tmp_path / "b", 12)
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        again.fit(_data(), ckpt_path=starting_point)
    assert again.loaded_step == 6
    assert f"resuming from {tmp_path / 'b/checkpoint_6.mdl'}" in caplog.text
    for name, value in _weights(straight).items():
        assert torch.equal(value, _weights(again)[name]), name
    saved = load_checkpoint(tmp_path / "b/checkpoint_12.mdl")
    assert saved["metadata"]["started_from"] == str(starting_point.resolve())


def test_a_named_run_checkpoint_still_wins(tmp_path, starting_point):
    _trainer(tmp_path / "b", 8).fit(_data(), ckpt_path=starting_point)
    rewound = _trainer(tmp_path / "b", 8)
    rewound.fit(_data(), ckpt_path=tmp_path / "b/checkpoint_4.mdl")
    assert rewound.loaded_step == 4


def test_null_with_checkpoints_present_says_what_it_ignores(tmp_path):
    _trainer(tmp_path / "b", 8).fit(_data())
    with pytest.raises(CheckpointError) as info:
        _trainer(tmp_path / "b", 8).fit(_data(), ckpt_path=None)
    newest = tmp_path / "b/checkpoint_8.mdl"
    assert str(info.value) == (
        f"{tmp_path / 'b'} holds checkpoints (checkpoint_8.mdl, checkpoint_4.mdl) that this run, "
        "starting at step 0 (ckpt_path: null starts from the model's own weights), ignores and "
        f"would write over: to resume, name the newest in --set trainer.fit.ckpt_path={newest} "
        "(or leave ckpt_path out); to start anew, give another model_dir (or checkpoint_root), "
        "or remove them"
    )
    assert load_checkpoint(newest)["global_step"] == 8


def test_null_in_an_empty_folder_starts_anew(tmp_path):
    fresh = _trainer(tmp_path / "b", 4)
    fresh.fit(_data(), ckpt_path=None)
    assert fresh.global_step == 4
    assert fresh.loaded_step is None


def test_another_runs_checkpoints_are_not_resumed_nor_written_over(tmp_path, starting_point):
    _trainer(tmp_path / "b", 8).fit(_data())  # a finished run from random weights
    with pytest.raises(CheckpointError) as info:
        _trainer(tmp_path / "b", 8).fit(_data(), ckpt_path=starting_point)
    assert f"starting at step 0 (from {starting_point}; they are another run's, which " in str(
        info.value
    )
    assert "started from no checkpoint), ignores and would write over" in str(info.value)
    assert load_checkpoint(tmp_path / "b/checkpoint_8.mdl")["global_step"] == 8


def test_a_model_only_load_of_a_finished_run_refuses_to_write_over_it(tmp_path):
    _trainer(tmp_path / "b", 8).fit(_data())
    before = load_checkpoint(tmp_path / "b/checkpoint_4.mdl")["model"]
    states = plugtrain.resolve("callback", "LoadCheckpointStates")(load_checkpoint_states="model")
    tuned = _trainer(tmp_path / "b", 8, callbacks=[states])
    with pytest.raises(CheckpointError, match="starting at step 0"):
        tuned.fit(_data(), ckpt_path=tmp_path / "b/checkpoint_8.mdl")
    after = load_checkpoint(tmp_path / "b/checkpoint_4.mdl")["model"]
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_an_interrupted_null_run_prints_a_command_that_resumes(tmp_path):
    trainer = _trainer(tmp_path / "b", 8)
    trainer.training_loop.started_anew = True
    with pytest.raises(TrainingInterrupted) as info:
        trainer.training_loop._stop_interrupted(_StreamStub(), _InterruptStub())
    path = tmp_path / "b/checkpoint_0.mdl"
    assert str(info.value).endswith(
        f"resume with the same command and --set trainer.fit.ckpt_path={path} "
        "(its ckpt_path: null starts anew)"
    )


class _StreamStub:
    def position(self):
        return None


class _InterruptStub:
    signal_number = 15
    repeated_while_saving = None

    def saving(self):
        return contextlib.nullcontext()
