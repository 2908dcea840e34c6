"""Bad arguments fail in the constructor and in the torch-free schema alike; the contract holds."""

from __future__ import annotations

import pytest
import torch

import plugtrain
from plugtrain.schema import check_arguments
from plugtrain.testing import assert_plugin_contract, assert_plugin_installed, distribution_names

BAD = [
    ("SGD", {"lr": -0.1}, "lr", "-0.1"),
    ("SGD", {"lr": 0.1, "momentum": -0.5}, "momentum", "-0.5"),
    ("SGD", {"lr": 0.1, "nesterov": True}, "nesterov", "momentum=0.0"),
    ("SGD", {"lr": 0.1, "nesterov": True, "momentum": 0.9, "dampening": 0.1}, "nesterov", "0.1"),
    ("SGD", {}, "lr", "missing required"),
    ("Adam", {"eps": -1e-8}, "eps", "-1e-08"),
    ("Adam", {"betas": (0.9, 1.0)}, "betas", "(0.9, 1.0)"),
    ("AdamW", {"betas": (-0.1, 0.999)}, "betas", "(-0.1, 0.999)"),
    ("AdamW", {"weight_decay": -0.01}, "weight_decay", "-0.01"),
    ("AdamW", {"fused": True, "correct_bias": False}, "fused", "correct_bias"),
    ("Adamax", {"weight_decay": -1}, "weight_decay", "-1"),
    ("Adadelta", {"rho": 1.5}, "rho", "1.5"),
    ("Adagrad", {"lr_decay": -1.0}, "lr_decay", "-1.0"),
    ("ASGD", {"lambd": -1.0}, "lambd", "-1.0"),
    ("NAdam", {"momentum_decay": -1.0}, "momentum_decay", "-1.0"),
    ("RAdam", {"lr": -1.0}, "lr", "-1.0"),
    ("RMSprop", {"alpha": -0.5}, "alpha", "-0.5"),
    ("Rprop", {"etas": (1.5, 1.2)}, "etas", "(1.5, 1.2)"),
    ("Rprop", {"step_sizes": (1.0, 0.1)}, "step_sizes", "(1.0, 0.1)"),
    ("Lamb", {"eps": -1.0}, "eps", "-1.0"),
    ("Lion", {"betas": (0.9, 1.2)}, "betas", "1.2"),
    ("Adafactor", {"lr": 0.1, "beta1": 0.9}, "beta1", "0.9"),
    ("Adafactor", {"lr": 0.1, "relative_step": True}, "relative_step", "True"),
    ("Adafactor", {"lr": 0.1, "warmup_init": True}, "warmup_init", "True"),
    ("Adafactor", {"lr": 0.1, "clip_threshold": 2.0}, "clip_threshold", "2.0"),
    ("Muon", {"momentum": 1.0}, "momentum", "1.0"),
    ("Muon", {"ns_steps": 0}, "ns_steps", "0"),
    ("Muon", {"fallback": "sgd"}, "fallback", "'sgd'"),
    ("Muon", {"ns_dtype": "float16"}, "ns_dtype", "'float16'"),
    ("SGD", {"lr": 0.1, "momentun": 0.9}, "momentun", "momentum"),
]


@pytest.mark.parametrize(("name", "kwargs", "argument", "value"), BAD)
def test_bad_arguments_name_the_argument_and_value(name, kwargs, argument, value):
    params = [torch.nn.Parameter(torch.ones(2, 2))]
    with pytest.raises(ValueError, match=argument) as raised:
        plugtrain.resolve("optimizer", name)(params, **kwargs)
    assert value in str(raised.value)
    # The torch-free schema finds the same problem, so a run file fails before anything is built.
    problems = check_arguments(
        plugtrain.get_registry().lookup("optimizer", name).schema_class, kwargs
    )
    assert any(argument in f"{key} {message}" and value in message for key, message in problems)


def test_bad_values_in_a_param_group_are_errors():
    param = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match=r"param group 0.lr: must be >= 0, got -1.0"):
        plugtrain.optim.AdamW([{"params": [param], "lr": -1.0}])
    with pytest.raises(ValueError, match=r"weight_decay: must be >= 0, got -0.5"):
        plugtrain.optim.Adam([{"params": [param], "weight_decay": -0.5}])


def test_muon_without_fallback_rejects_one_dimensional_parameters():
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match=r"Muon.fallback: cannot orthogonalise bias parameter"):
        plugtrain.optim.Muon(list(model.named_parameters()), fallback=None)
    plugtrain.optim.Muon([model.weight], fallback=None)


def test_plugin_is_installed_and_keeps_its_contract():
    assert_plugin_installed("plugtrain-optimizers")
    assert_plugin_contract("plugtrain-optimizers")


def test_all_seventeen_resolve_case_insensitively():
    expected = [
        "ASGD",
        "Adadelta",
        "Adafactor",
        "Adagrad",
        "Adam",
        "AdamW",
        "AdamWScheduleFree",
        "Adamax",
        "Lamb",
        "Lion",
        "Muon",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SGD",
        "SGDScheduleFree",
    ]
    assert distribution_names("plugtrain-optimizers", "optimizer") == expected
    for name in expected:
        cls = plugtrain.resolve("optimizer", name.lower() if name != "Adam" else name)
        assert issubclass(cls, torch.optim.Optimizer)
