"""plugtrain.build_optimization: a run file's optimizer and schedulers for any training loop."""

from __future__ import annotations

import pytest
import torch

import plugtrain
from plugtrain.errors import ConfigError

pytest.importorskip("plugtrain_optimizers", reason="plugtrain-optimizers is not installed")
pytest.importorskip("plugtrain_schedulers", reason="plugtrain-schedulers is not installed")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))


LINEAR = {"initial_learning_rate": 0.0, "end_learning_rate": 0.1, "total_iters": 4}


def test_groups_are_tagged_and_split_as_the_trainer_does():
    built = plugtrain.build_optimization(
        _model(),
        {
            "optimizer": {
                "AdamW": {
                    "lr": 0.1,
                    "weight_decay": 0.01,
                    "params": [{"params": "2.*", "tag": "head"}],
                }
            },
            "schedulers": [{"LinearLR": {**LINEAR, "param_group_tags": "head"}}],
        },
    )
    groups = built.optimizer.param_groups
    assert [(g["param_names"], g.get("tags"), g["weight_decay"]) for g in groups] == [
        (["0.weight"], None, 0.01),
        (["0.bias", "1.weight", "1.bias"], None, 0.0),
        (["2.weight"], {"head"}, 0.01),
        (["2.bias"], {"head"}, 0.0),
    ]
    assert [g["lr"] for g in groups] == [0.1, 0.1, 0.0, 0.0]
    (scheduler,) = built.schedulers
    scheduler.step()
    assert [g["lr"] for g in groups] == [0.1, 0.1, 0.025, 0.025]


def test_adjust_learning_rate_scales_the_schedule_per_group():
    built = plugtrain.build_optimization(
        _model(),
        {
            "optimizer": {"SGD": {"lr": 0.1, "adjust_learning_rate": {"2": 0.5}}},
            "schedulers": [{"ConstantLR": {"learning_rate": 0.2}}],
        },
    )
    (scheduler,) = built.schedulers
    assert type(scheduler).__name__ == "ScalePerParamLR"
    assert sorted({g["lr"] for g in built.optimizer.param_groups}) == [0.1, 0.2]


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as raised:
        plugtrain.build_optimization(
            _model(),
            {
                "optimizer": {"AdamW": {"lrr": 0.1}},
                "schedulers": [{"Nope": {}}],
                "model": {"MLP": {}},
            },
        )
    assert [issue.path for issue in raised.value.issues] == [
        "model",
        "optimizer.AdamW.lrr",
        "schedulers[0].Nope",
    ]


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({}, "optimizer"),
        ({"optimizer": {"SGD": {"lr": 0.1}}, "schedulers": "LinearLR"}, "schedulers"),
    ],
)
def test_a_missing_optimizer_or_malformed_schedulers_is_a_config_error(config, path):
    with pytest.raises(ConfigError) as raised:
        plugtrain.build_optimization(_model(), config)
    assert [issue.path for issue in raised.value.issues] == [path]


def test_two_schedulers_of_one_key_and_group_are_refused():
    with pytest.raises(ConfigError, match="both set 'lr' of param group 0"):
        plugtrain.build_optimization(
            _model(),
            {
                "optimizer": {"SGD": {"lr": 0.1}},
                "schedulers": [{"LinearLR": LINEAR}, {"ConstantLR": {"learning_rate": 0.1}}],
            },
        )
