"""The optimizer evaluation contract: eval() around every evaluation and save, train() after.

A real fit with the built-in Schedule-Free AdamW on a tiny MLP (CPU): the logged validation
loss is the score of the averaged weights x, checkpoints hold x, and validate/validate_all
score x too; the optimizer trains at y between them.
"""

from __future__ import annotations

import pytest
import torch

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.train.checkpointing.storage.archive import load_checkpoint
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _data(split="train"):
    return synthetic_loader(
        batch_size=8, num_examples=64, in_features=8, num_classes=3, split=split
    )


class ModeLog:
    """Records the optimizer's mode at every hook it sees."""

    def __init__(self):
        self.modes = []

    def _mode(self, trainer):
        return "train" if trainer.optimizer.param_groups[0]["train_mode"] else "eval"

    def on_validate_start(self, trainer):
        self.modes.append(("validate", self._mode(trainer)))

    def on_before_save_checkpoint(self, trainer, step):
        self.modes.append(("save", self._mode(trainer)))

    def on_train_step_start(self, trainer, step):
        self.modes.append(("step", self._mode(trainer)))


def _trainer(tmp_path, callbacks=()):
    adamw_sf = plugtrain.resolve("optimizer", "AdamWScheduleFree")
    return Trainer(
        device="CPU",
        model_dir=tmp_path / "run",
        model=lambda: MLP(in_features=8, out_features=3, hidden=16),
        optimizer=lambda model: adamw_sf(model.parameters(), lr=0.02, warmup_steps=2),
        loop={"max_steps": 6, "eval_frequency": 3, "eval_steps": 2},
        checkpoint={"steps": 3},
        callbacks=list(callbacks),
        seed=3,
    )


def test_schedule_free_is_evaluated_and_saved_at_its_average(tmp_path):
    log = ModeLog()
    trainer = _trainer(tmp_path, [log])
    last = trainer.fit(_data(), _data("val"))
    assert {mode for hook, mode in log.modes if hook in ("validate", "save")} == {"eval"}
    assert {mode for hook, mode in log.modes if hook == "step"} == {"train"}
    optimizer = trainer.optimizer
    assert optimizer.param_groups[0]["train_mode"]  # back to train() after the last save
    at_y = trainer.evaluation.evaluate(_data("val"), 2)  # no mode change: the training weights
    optimizer.eval()
    x = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    at_x = trainer.evaluation.evaluate(_data("val"), 2)
    optimizer.train()
    assert last["loss"] == at_x["loss"] != at_y["loss"]
    assert trainer.evaluate(_data("val"), 2)["loss"] == at_x["loss"]
    saved = load_checkpoint(trainer.checkpoint_path(6))
    for name, tensor in x.items():
        assert torch.equal(saved["model"][name], tensor), name
    assert saved["optimizer"]["param_groups"][0]["train_mode"] is False
    # validate and validate_all score the checkpoint's x, as the fit did
    fresh = _trainer(tmp_path)
    assert fresh.validate(_data("val"))["loss"] == pytest.approx(at_x["loss"], rel=1e-6)
    records = _trainer(tmp_path).validate_all(_data("val"), [trainer.checkpoint_path(6)])
    assert records[0]["loss"] == pytest.approx(at_x["loss"], rel=1e-6)
