"""Every error case of SPEC section 5 and the stricter validation of section 9."""

from __future__ import annotations

from typing import Any

import pytest

import plugtrain
from plugtrain.errors import ConfigError


def build(helpers, name: str, **arguments: Any):
    return plugtrain.resolve("scheduler", name)(helpers.build_optimizer(), **arguments)


@pytest.mark.parametrize(
    ("name", "arguments", "match"),
    [
        (
            "LinearWD",
            {"initial_weight_decay": 0.1, "initial_val": 0.1, "end_val": 0, "total_iters": 5},
            "give only one",
        ),
        ("ConstantWD", {"weight_decay": 0.1, "val": 0.2}, "give only one"),
        (
            "PiecewiseConstantWD",
            {"weight_decays": [1.0], "vals": [1.0], "milestones": []},
            "give only one",
        ),
        ("CyclicWD", {"base_val": 0.0, "base_weight_decay": 0.0, "max_val": 1.0}, "give only one"),
        (
            "LinearLR",
            {"initial_learning_rate": -0.1, "end_learning_rate": 0.0, "total_iters": 5},
            ">= 0",
        ),
        ("ConstantWD", {"val": -1.0}, ">= 0"),
        (
            "LinearLR",
            {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iters": 0},
            "> 0",
        ),
        (
            "LinearLR",
            {"initial_learning_rate": 0.1, "end_learning_rate": 0.0},
            "missing required argument 'total_iters'",
        ),
        (
            "LinearLR",
            {"initial_learning_rate": 0.1, "end_learning_rate": 0.0, "total_iter": 3},
            "Did you mean 'total_iters'",
        ),
        (
            "LinearLR",
            {"initial_learning_rate": "0.1", "end_learning_rate": 0.0, "total_iters": 3},
            "must be of type float",
        ),
        ("StepLR", {"initial_learning_rate": 0.1, "step_size": 0, "gamma": 0.5}, "> 0"),
        (
            "MultiStepLR",
            {"initial_learning_rate": 0.1, "gamma": 0.5, "milestones": [5, -3]},
            ">= 0",
        ),
        (
            "PiecewiseConstantLR",
            {"learning_rates": [1.0, 0.5], "milestones": [2, 4]},
            "needs one more entry than milestones",
        ),
        (
            "PiecewiseConstantWD",
            {"vals": [1.0], "milestones": [2]},
            "weight_decays needs one more entry",
        ),
        (
            "PiecewiseConstantLR",
            {"learning_rates": [1.0, 0.5, 0.1], "milestones": [4, 4]},
            "strictly increasing",
        ),
        ("CyclicLR", {"base_lr": 0.1, "max_lr": 1.0, "mode": "sine"}, "must be one of"),
        ("CyclicLR", {"base_lr": 0.1, "max_lr": 1.0, "scale_mode": "epochs"}, "must be one of"),
        (
            "OneCycleLR",
            {"initial_learning_rate": 0.1, "max_lr": 1.0, "anneal_strategy": "cosine"},
            "must be one of",
        ),
        (
            "OneCycleLR",
            {"initial_learning_rate": 0.1, "max_lr": 1.0, "total_steps": 3},
            "leaves a phase without steps",
        ),
        (
            "OneCycleLR",
            {"initial_learning_rate": 0.1, "max_lr": 1.0, "pct_start": 1.5},
            "< 1",
        ),
        (
            "CosineAnnealingWarmRestarts",
            {"initial_learning_rate": 0.1, "T_0": 5, "T_mult": 0},
            ">= 1",
        ),
        ("CosineAnnealingLR", {"initial_learning_rate": 0.1, "T_max": 5, "eta_min": -1.0}, ">= 0"),
        ("LambdaLR", {"initial_learning_rate": 0.1, "lr_lambda": 3}, "must be of type"),
        (
            "LinearLR",
            {
                "initial_learning_rate": 0.1,
                "end_learning_rate": 0.0,
                "total_iters": 3,
                "param_group_tags": 7,
            },
            "param_group_tags",
        ),
        (
            "LinearLR",
            {
                "initial_learning_rate": 0.1,
                "end_learning_rate": 0.0,
                "total_iters": 3,
                "param_group_tags": ["a", "a"],
            },
            "more than once",
        ),
        ("SequentialLR", {"schedulers": []}, "at least one scheduler"),
        (
            "SequentialLR",
            {"schedulers": [{"ConstantLR": {"learning_rate": 1.0}}] * 2, "milestones": [2, 4]},
            "one entry fewer",
        ),
        (
            "SequentialLR",
            {"schedulers": [{"ConstantLR": {"learning_rate": 1.0}}] * 3, "milestones": [4, 2]},
            "strictly increasing",
        ),
        ("SequentialLR", {"schedulers": [{"A": {}, "B": {}}]}, "one-key mapping"),
        ("ChainedLR", {"schedulers": []}, "at least one scheduler"),
    ],
)
def test_bad_arguments_are_config_errors_naming_argument_and_value(helpers, name, arguments, match):
    with pytest.raises(ConfigError, match=match) as caught:
        build(helpers, name, **arguments)
    assert isinstance(caught.value, ValueError)
    assert name in str(caught.value)


def test_sequential_without_milestones_needs_child_lengths(helpers):
    children = [{"StepLR": {"initial_learning_rate": 1.0, "step_size": 2, "gamma": 0.5}}] * 2
    with pytest.raises(ValueError, match="scheduler 0 has no total_iters"):
        build(helpers, "SequentialLR", schedulers=children)


def test_wrappers_refuse_children_of_the_other_kind(helpers):
    with pytest.raises(
        ValueError, match="schedules 'weight_decay', but SequentialLR schedules 'lr'"
    ):
        build(helpers, "SequentialLR", schedulers=[{"ConstantWD": {"val": 0.1}}])


def test_unknown_child_names_are_reported_with_suggestions(helpers):
    with pytest.raises(plugtrain.UnknownNameError, match="CosineDecayLR"):
        build(helpers, "SequentialLR", schedulers=[{"CosineDecayLRR": {}}])


def test_chain_child_starting_at_zero_is_an_error(helpers):
    children = [
        {"ConstantLR": {"learning_rate": 1.0}},
        {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 1.0, "total_iters": 3}},
    ]
    with pytest.raises(ValueError, match="starts at 0"):
        build(helpers, "ChainedLR", schedulers=children)


def test_chained_needs_an_optimizer_for_mapping_children():
    with pytest.raises(TypeError, match="pass the optimizer first"):
        plugtrain.resolve("scheduler", "ChainedLR")(
            schedulers=[{"ConstantLR": {"learning_rate": 1.0}}]
        )


def test_scale_per_param_cannot_be_nested(helpers):
    inner = {"ScalePerParamLR": {"scheduler": {"ConstantLR": {"learning_rate": 1.0}}}}
    with pytest.raises(ValueError, match="only be the outermost"):
        build(helpers, "SequentialLR", schedulers=[inner])


def test_child_of_another_optimizer_is_an_error(helpers):
    child = build(helpers, "ConstantLR", learning_rate=0.1)
    with pytest.raises(ValueError, match="another optimizer"):
        build(helpers, "SequentialLR", schedulers=[child])


def test_a_scheduler_needs_an_optimizer():
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        plugtrain.resolve("scheduler", "ConstantLR")([], learning_rate=0.1)


def test_positional_arguments_follow_cstorch_order(helpers):
    optimizer = helpers.build_optimizer()
    plugtrain.resolve("scheduler", "LinearLR")(optimizer, 0.01, 0.001, 500)
    assert optimizer.param_groups[0]["lr"] == 0.01
    with pytest.raises(TypeError):
        plugtrain.resolve("scheduler", "ConstantLR")(optimizer, 0.1, 5, None, "extra")
