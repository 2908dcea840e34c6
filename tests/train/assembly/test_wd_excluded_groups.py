"""Weight-decay schedulers leave the zero-decay twin groups (biases, norms) alone by default.

Model Zoo/cstorch write every group a scheduler's tags select, the twins included (a deliberate
difference, docs/modelzoo-migration.md); old checkpoints that decayed the twins keep doing so.
"""

from __future__ import annotations

import logging

import pytest
import torch

import plugtrain
from plugtrain.bases.param_groups import build_param_groups
from plugtrain.scheduler import excluded_from_decay
from plugtrain.train.components.scheduler_checks import check_scheduler_overlap


def _optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    sgd = plugtrain.resolve("optimizer", "SGD")
    return sgd(build_param_groups(model), lr=0.1, weight_decay=0.1)


def _cosine_wd(optimizer):
    wd = plugtrain.resolve("scheduler", "CosineDecayWD")
    return wd(optimizer, initial_weight_decay=0.1, end_weight_decay=0.01, total_iters=4)


def test_cosine_decay_wd_leaves_the_zero_decay_group_at_zero():
    optimizer = _optimizer()
    twins = [i for i, g in enumerate(optimizer.param_groups) if excluded_from_decay(g)]
    assert twins == [1]  # the bias and LayerNorm parameters
    scheduler = _cosine_wd(optimizer)
    assert (scheduler.group_indices, scheduler.excluded_groups) == ([0], [1])
    for _ in range(5):
        scheduler.step()
    assert optimizer.param_groups[0]["weight_decay"] == pytest.approx(0.01)
    assert optimizer.param_groups[1]["weight_decay"] == 0.0


def test_a_checkpoint_that_decayed_the_twin_keeps_decaying_it(caplog):
    optimizer = _optimizer()
    old_state = {"last_step": 2, "group_indices": [0, 1]}  # saved before plugin API 1.1
    scheduler = _cosine_wd(optimizer)
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        scheduler.load_state_dict(old_state)
    assert "keeps doing so" in caplog.text
    assert scheduler.group_indices == [0, 1]
    assert optimizer.param_groups[1]["weight_decay"] == optimizer.param_groups[0]["weight_decay"]
    with pytest.raises(ValueError, match="targets param groups"):
        _cosine_wd(_optimizer()).load_state_dict({"last_step": 2, "group_indices": [1]})


def test_a_foreign_wd_scheduler_writing_the_twin_is_warned_about(caplog):
    class EveryGroupWD:  # a third party's scheduler that ignores the marker
        param_key = "weight_decay"

        def __init__(self, optimizer):
            self.optimizer = optimizer

        def step(self):
            for group in self.optimizer.param_groups:
                group["weight_decay"] *= 0.5

    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        check_scheduler_overlap([EveryGroupWD(_optimizer())])
    assert "scheduler 0 (EveryGroupWD) sets the weight decay of the zero-decay" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        check_scheduler_overlap([_cosine_wd(_optimizer())])
    assert "zero-decay" not in caplog.text
