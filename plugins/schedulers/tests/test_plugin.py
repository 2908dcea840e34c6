"""The distribution is installed, honours the plugin contract and registers all 38 names."""

from __future__ import annotations

import inspect
import subprocess
import sys

import plugtrain
from plugtrain.testing import assert_plugin_contract, assert_plugin_installed

LR_NAMES = [
    "ConstantLR",
    "PolynomialLR",
    "LinearLR",
    "ExponentialLR",
    "InverseExponentialTimeDecayLR",
    "InverseSquareRootDecayLR",
    "CosineDecayLR",
    "CosineAnnealingLR",
    "CosineAnnealingWarmRestarts",
    "MultiStepLR",
    "StepLR",
    "MultiplicativeLR",
    "LambdaLR",
    "CyclicLR",
    "OneCycleLR",
    "SequentialLR",
    "PiecewiseConstantLR",
    "ChainedLR",
    "ScalePerParamLR",
]
WD_NAMES = [
    "CosineAnnealingWarmRestartsWD" if n.endswith("Restarts") else n[:-2] + "WD" for n in LR_NAMES
]


def test_distribution_is_installed():
    assert_plugin_installed("plugtrain-schedulers")


def test_plugin_contract():
    assert_plugin_contract("plugtrain-schedulers")


def test_all_38_names_resolve_and_are_listed():
    assert sorted(LR_NAMES + WD_NAMES) == plugtrain.names("scheduler")
    for name in LR_NAMES + WD_NAMES:
        cls = plugtrain.resolve("scheduler", name)
        assert cls.__name__ == name
        schema = plugtrain.get_registry().lookup("scheduler", name).schema_class
        assert schema.schedule_key == ("lr" if name in LR_NAMES else "weight_decay")
        assert cls.param_key == schema.schedule_key


def test_chained_scheduler_alias_and_case_insensitive_lookup():
    assert plugtrain.resolve("scheduler", "ChainedScheduler") is plugtrain.resolve(
        "scheduler", "ChainedLR"
    )
    assert plugtrain.resolve("scheduler", "cosinedecaylr").__name__ == "CosineDecayLR"


def test_wd_twins_are_siblings_not_subclasses_of_lr():
    lr = plugtrain.resolve("scheduler", "SequentialLR")
    wd = plugtrain.resolve("scheduler", "SequentialWD")
    assert not issubclass(wd, lr)
    assert lr.__bases__ == wd.__bases__


def test_signatures_come_from_the_schemas():
    params = inspect.signature(plugtrain.resolve("scheduler", "CosineDecayWD")).parameters
    assert list(params) == [
        "optimizer",
        "initial_weight_decay",
        "end_weight_decay",
        "total_iters",
        "param_group_tags",
        "kwargs",
    ]
    chained = inspect.signature(plugtrain.resolve("scheduler", "ChainedLR")).parameters
    assert list(chained) == ["schedulers", "param_group_tags"]


def test_schemas_and_curves_import_without_torch():
    script = (
        "import sys, plugtrain_schedulers.schemas, plugtrain_schedulers.curves\n"
        "print(any(m.split('.')[0] == 'torch' for m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"
