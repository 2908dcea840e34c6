"""Every scheduler of the distribution passes plugtrain's behavioural conformance kit."""

from __future__ import annotations

import math
from typing import Any

import pytest

import plugtrain
from plugtrain.testing import check_scheduler

LR_ARGUMENTS: dict[str, dict[str, Any]] = {
    "ConstantLR": {"learning_rate": 0.1},
    "PolynomialLR": {
        "initial_learning_rate": 0.1,
        "end_learning_rate": 0.01,
        "total_iters": 8,
        "power": 2.0,
    },
    "LinearLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.01, "total_iters": 8},
    "ExponentialLR": {"initial_learning_rate": 0.1, "total_iters": 4, "decay_rate": 0.5},
    "InverseExponentialTimeDecayLR": {
        "initial_learning_rate": 0.1,
        "step_exponent": 1.0,
        "total_iters": 4,
        "decay_rate": 0.5,
    },
    "InverseSquareRootDecayLR": {},
    "CosineDecayLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.01, "total_iters": 8},
    "CosineAnnealingLR": {"initial_learning_rate": 0.1, "T_max": 5},
    "CosineAnnealingWarmRestarts": {"initial_learning_rate": 0.1, "T_0": 3},
    "MultiStepLR": {"initial_learning_rate": 0.1, "gamma": 0.5, "milestones": [2, 5]},
    "StepLR": {"initial_learning_rate": 0.1, "step_size": 3, "gamma": 0.5},
    "MultiplicativeLR": {"initial_learning_rate": 0.1, "coefficient": 0.9},
    "LambdaLR": {"initial_learning_rate": 0.1, "lr_lambda": math.exp},
    "CyclicLR": {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 3},
    "OneCycleLR": {"initial_learning_rate": 0.01, "max_lr": 0.1, "total_steps": 12},
    "PiecewiseConstantLR": {"learning_rates": [0.1, 0.05, 0.01], "milestones": [3, 6]},
    "SequentialLR": {
        "schedulers": [
            {
                "LinearLR": {
                    "initial_learning_rate": 0.0,
                    "end_learning_rate": 0.1,
                    "total_iters": 3,
                }
            },
            {
                "CosineDecayLR": {
                    "initial_learning_rate": 0.1,
                    "end_learning_rate": 0.0,
                    "total_iters": 6,
                }
            },
        ]
    },
    "ChainedLR": {
        "schedulers": [
            {"ConstantLR": {"learning_rate": 0.1}},
            {"StepLR": {"initial_learning_rate": 0.5, "step_size": 2, "gamma": 0.5}},
        ]
    },
    "ScalePerParamLR": {
        "scheduler": {
            "LinearLR": {"initial_learning_rate": 0.1, "end_learning_rate": 0.01, "total_iters": 8}
        }
    },
}
RENAMED = {
    "learning_rate": "weight_decay",
    "initial_learning_rate": "initial_weight_decay",
    "end_learning_rate": "end_weight_decay",
    "base_lr": "base_weight_decay",
    "max_lr": "max_weight_decay",
    "lr_lambda": "wd_lambda",
    "learning_rates": "weight_decays",
}


def _wd_name(name: str) -> str:
    return name + "WD" if name.endswith("Restarts") else name[:-2] + "WD"


def _as_wd(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            (_wd_name(k) if k in LR_ARGUMENTS else RENAMED.get(k, k)): _as_wd(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_as_wd(v) for v in value]
    return value


ARGUMENTS = {
    **LR_ARGUMENTS,
    **{_wd_name(name): _as_wd(arguments) for name, arguments in LR_ARGUMENTS.items()},
}

# Properties that do not apply to a built-in, and why (the kit requires a reason for each).
OPT_OUTS: dict[str, dict[str, str]] = {}


def test_every_scheduler_has_arguments_here():
    assert sorted(ARGUMENTS) == plugtrain.names("scheduler")


@pytest.mark.parametrize("name", sorted(ARGUMENTS))
def test_scheduler_conformance(name):
    report = check_scheduler(
        plugtrain.resolve("scheduler", name), ARGUMENTS[name], skip=OPT_OUTS.get(name), name=name
    )
    assert report.outcome("state_round_trip") == "passed"
