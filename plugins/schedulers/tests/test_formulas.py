"""Every closed form at e = 0, T - 1, T, T + 1 and far beyond, against values worked by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest

import plugtrain
from plugtrain.schema import validated_arguments

pi, cos, sqrt = math.pi, math.cos, math.sqrt

# (name, arguments, {step: value}); T = 10 wherever a schedule has a length.
CASES: list[tuple[str, dict[str, Any], dict[int, float]]] = [
    ("ConstantLR", {"learning_rate": 0.3}, {0: 0.3, 9: 0.3, 10: 0.3, 11: 0.3, 10**4: 0.3}),
    (
        "PolynomialLR",
        {"initial_learning_rate": 1.0, "end_learning_rate": 0.1, "total_iters": 10, "power": 2},
        {0: 1.0, 9: 0.9 * 0.1**2 + 0.1, 10: 0.1, 11: 0.1, 10**4: 0.1},
    ),
    (
        "PolynomialLR",
        {"initial_learning_rate": 1.0, "end_learning_rate": 0.1, "total_iters": 10, "cycle": True},
        # T -> T * ceil(e / T): 20 at e = 11, 1000 at e = 1000, 1010 at e = 1001.
        {0: 1.0, 9: 0.19, 10: 0.1, 11: 0.9 * 9 / 20 + 0.1, 1000: 0.1, 1001: 0.9 * 9 / 1010 + 0.1},
    ),
    (
        "LinearLR",
        {"initial_learning_rate": 0.01, "end_learning_rate": 0.001, "total_iters": 10},
        {0: 0.01, 9: 0.0019, 10: 0.001, 11: 0.001, 10**4: 0.001},
    ),
    (
        "ExponentialLR",
        {"initial_learning_rate": 1.0, "total_iters": 10, "decay_rate": 0.5},
        {0: 1.0, 9: 0.5**0.9, 10: 0.5, 11: 0.5**1.1, 1000: 0.5**100},
    ),
    (
        "ExponentialLR",
        {"initial_learning_rate": 1.0, "total_iters": 10, "decay_rate": 0.5, "staircase": True},
        {0: 1.0, 9: 1.0, 10: 0.5, 11: 0.5, 1000: 0.5**100},
    ),
    (
        "InverseExponentialTimeDecayLR",
        {"initial_learning_rate": 1.0, "step_exponent": 2, "total_iters": 10, "decay_rate": 0.5},
        {0: 1.0, 9: 1 / (1 + 0.5 * 8.1), 10: 1 / 6, 11: 1 / (1 + 0.5 * 12.1), 1000: 1 / 50001},
    ),
    (
        "InverseExponentialTimeDecayLR",
        {
            "initial_learning_rate": 1.0,
            "step_exponent": 2,
            "total_iters": 10,
            "decay_rate": 0.5,
            "staircase": True,
        },
        {0: 1.0, 9: 1 / 5, 10: 1 / 6, 11: 1 / 7, 1000: 1 / 50001},
    ),
    (
        "InverseSquareRootDecayLR",
        {"initial_learning_rate": 2.0, "scale": 0.5, "warmup_steps": 4},
        {0: 0.5, 3: 0.5, 4: 0.5, 9: 1 / 3, 10**4: 0.01},
    ),
    ("InverseSquareRootDecayLR", {}, {0: 1.0, 1: 1.0, 4: 0.5, 100: 0.1}),
    (
        "CosineDecayLR",
        {"initial_learning_rate": 1.0, "end_learning_rate": 0.1, "total_iters": 10},
        {0: 1.0, 9: 0.1 + 0.45 * (1 + cos(0.9 * pi)), 10: 0.1, 11: 0.1, 10**4: 0.1},
    ),
    (
        "CosineAnnealingLR",
        {"initial_learning_rate": 1.0, "T_max": 10, "eta_min": 0.1},
        {
            0: 1.0,
            9: 0.1 + 0.45 * (1 + cos(0.9 * pi)),
            10: 0.1,
            11: 0.1 + 0.45 * (1 + cos(1.1 * pi)),
            20: 1.0,
            1000: 1.0,
            1005: 0.55,
        },
    ),
    (
        "CosineAnnealingWarmRestarts",
        {"initial_learning_rate": 1.0, "T_0": 10, "T_mult": 2},
        # Periods start at 0, 10, 30, 70, ..., 630 (length 640), 1270.
        {
            0: 1.0,
            9: 0.5 * (1 + cos(0.9 * pi)),
            10: 1.0,
            11: 0.5 * (1 + cos(pi / 20)),
            29: 0.5 * (1 + cos(19 * pi / 20)),
            30: 1.0,
            1000: 0.5 * (1 + cos(370 * pi / 640)),
        },
    ),
    (
        "CosineAnnealingWarmRestarts",
        {"initial_learning_rate": 1.0, "T_0": 10, "eta_min": 0.2},
        {0: 1.0, 9: 0.2 + 0.4 * (1 + cos(0.9 * pi)), 10: 1.0, 11: 0.2 + 0.4 * (1 + cos(0.1 * pi))},
    ),
    (
        "MultiStepLR",
        {"initial_learning_rate": 1.0, "gamma": 0.1, "milestones": [10, 20]},
        {0: 1.0, 9: 1.0, 10: 0.1, 11: 0.1, 20: 0.01, 10**4: 0.01},
    ),
    (
        "StepLR",
        {"initial_learning_rate": 1.0, "step_size": 10, "gamma": 0.5},
        {0: 1.0, 9: 1.0, 10: 0.5, 11: 0.5, 1000: 0.5**100},
    ),
    (
        "MultiplicativeLR",
        {"initial_learning_rate": 1.0, "coefficient": 0.9},
        {0: 1.0, 9: 0.9**9, 10: 0.9**10, 11: 0.9**11, 1000: 0.9**1000},
    ),
    (
        "LambdaLR",
        {"initial_learning_rate": 2.0, "lr_lambda": lambda e: 1 / (e + 1)},
        {0: 2.0, 9: 0.2, 10: 2 / 11, 1000: 2 / 1001},
    ),
    (
        "CyclicLR",
        {"base_lr": 0.1, "max_lr": 1.0, "step_size_up": 4, "step_size_down": 6},
        {0: 0.1, 2: 0.55, 4: 1.0, 9: 0.1 + 0.9 / 6, 10: 0.1, 14: 1.0, 1004: 1.0},
    ),
    (
        "CyclicLR",
        {
            "base_lr": 0.1,
            "max_lr": 1.0,
            "step_size_up": 4,
            "step_size_down": 6,
            "mode": "triangular2",
        },
        {4: 1.0, 14: 0.55, 24: 0.1 + 0.9 / 4},
    ),
    (
        "CyclicLR",
        # exp_range scales by gamma ** e unless scale_mode says otherwise (torch's default).
        {"base_lr": 0.1, "max_lr": 1.0, "step_size_up": 4, "mode": "exp_range", "gamma": 0.99},
        {4: 0.1 + 0.9 * 0.99**4, 12: 0.1 + 0.9 * 0.99**12},
    ),
    (
        "CyclicLR",
        {
            "base_lr": 0.1,
            "max_lr": 1.0,
            "step_size_up": 4,
            "mode": "exp_range",
            "gamma": 0.99,
            "scale_mode": "cycle",
        },
        {4: 0.1 + 0.9 * 0.99, 12: 0.1 + 0.9 * 0.99**2},
    ),
    (
        "MultiStepLR",
        {"initial_learning_rate": 1.0, "gamma": 0.1, "milestones": [20, 10, 10]},
        {0: 1.0, 9: 1.0, 10: 0.01, 19: 0.01, 20: 0.001, 10**4: 0.001},
    ),
    (
        "OneCycleLR",
        {"initial_learning_rate": 0.1, "max_lr": 1.0, "total_steps": 100},
        # Phase ends 29 and 99; final value 0.1 / 1e4.
        {
            0: 0.1,
            29: 1.0,
            30: 1e-5 + (1 - 1e-5) / 2 * (cos(pi / 70) + 1),
            98: 1e-5 + (1 - 1e-5) / 2 * (cos(69 * pi / 70) + 1),
            99: 1e-5,
            100: 1e-5,
            10**4: 1e-5,
        },
    ),
    (
        "OneCycleLR",
        {
            "initial_learning_rate": 0.1,
            "max_lr": 1.0,
            "total_steps": 100,
            "final_div_factor": 10,
            "three_phase": True,
            "anneal_strategy": "linear",
        },
        # Phase ends 29, 58, 99.
        {0: 0.1, 15: 0.1 + 0.9 * 15 / 29, 29: 1.0, 40: 1.0 - 0.9 * 11 / 29, 58: 0.1},
    ),
    (
        "PiecewiseConstantLR",
        {"learning_rates": [1.0, 0.5, 0.1], "milestones": [10, 20]},
        {0: 1.0, 9: 1.0, 10: 0.5, 11: 0.5, 20: 0.1, 10**4: 0.1},
    ),
]

WD_NAMES = {
    "learning_rate": "weight_decay",
    "initial_learning_rate": "initial_weight_decay",
    "end_learning_rate": "end_weight_decay",
    "learning_rates": "weight_decays",
    "base_lr": "base_weight_decay",
    "max_lr": "max_weight_decay",
    "lr_lambda": "wd_lambda",
}


def wd_twin(name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    twin = "CosineAnnealingWarmRestartsWD" if name.endswith("Restarts") else name[:-2] + "WD"
    return twin, {WD_NAMES.get(k, k): v for k, v in arguments.items()}


IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


@pytest.mark.parametrize(("name", "arguments", "expected"), CASES, ids=IDS)
def test_learning_rate_formula(helpers, name, arguments, expected):
    optimizer = helpers.build_optimizer()
    scheduler = plugtrain.resolve("scheduler", name)(optimizer, **arguments)
    found = helpers.run(scheduler, expected)
    assert found == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert optimizer.param_groups[0]["weight_decay"] == 0.25


@pytest.mark.parametrize(("name", "arguments", "expected"), CASES, ids=IDS)
def test_weight_decay_twin_follows_the_same_formula(helpers, name, arguments, expected):
    twin, renamed = wd_twin(name, arguments)
    optimizer = helpers.build_optimizer()
    scheduler = plugtrain.resolve("scheduler", twin)(optimizer, **renamed)
    assert scheduler.param_key == "weight_decay"
    found = helpers.run(scheduler, expected)
    assert found == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert optimizer.param_groups[0]["lr"] == 0.5


@pytest.mark.parametrize(("name", "arguments", "expected"), CASES, ids=IDS)
def test_class_values_equal_the_schema_curve(helpers, name, arguments, expected):
    for kind_name, given in ((name, arguments), wd_twin(name, arguments)):
        component = plugtrain.get_registry().lookup("scheduler", kind_name)
        schema = component.schema_class
        curve = schema.curve(validated_arguments(schema, given, owner=kind_name), None)
        scheduler = component.load()(helpers.build_optimizer(), **given)
        found = helpers.run(scheduler, expected)
        assert found == {e: curve(e) for e in expected}


def test_cost_of_a_step_does_not_depend_on_the_step_index(helpers):
    """Jumping a million steps ahead (state loading) evaluates the closed form directly."""
    optimizer = helpers.build_optimizer()
    cls = plugtrain.resolve("scheduler", "CosineAnnealingWarmRestarts")
    scheduler = cls(optimizer, initial_learning_rate=1.0, T_0=10, T_mult=3)
    scheduler.load_state_dict({"last_step": 10**12})
    # Period n starts at 5 (3^n - 1) and lasts 10 * 3^n; 10^12 falls in period 23.
    start, length = 5 * (3**23 - 1), 10 * 3**23
    assert start <= 10**12 < start + length
    assert optimizer.param_groups[0]["lr"] == pytest.approx(
        0.5 * (1 + cos(pi * (10**12 - start) / length)), rel=1e-9
    )


def test_overflowing_growth_saturates_instead_of_raising(helpers):
    optimizer = helpers.build_optimizer()
    cls = plugtrain.resolve("scheduler", "MultiplicativeLR")
    scheduler = cls(optimizer, initial_learning_rate=1.0, coefficient=1.5)
    scheduler.load_state_dict({"last_step": 10**6})
    assert optimizer.param_groups[0]["lr"] == math.inf
