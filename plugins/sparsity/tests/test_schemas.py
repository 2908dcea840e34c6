"""The algorithms' argument schemas as the installed plugin registers them (torch-free)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from plugtrain.errors import ConfigError
from plugtrain.registry import Registry
from plugtrain.schema import validated_arguments
from plugtrain.testing import assert_plugin_installed

GPT3_DROP = {"type": "cosine", "init": 0.3, "half_period": 3584}


def _schema(registry: Registry, kind: str, name: str) -> type:
    return registry.lookup(kind, name).schema_class


def _problems(registry: Registry, name: str, arguments: dict[str, Any]) -> list[str]:
    try:
        validated_arguments(_schema(registry, "sparsity", name), arguments, owner=name)
    except ConfigError as exc:
        return [str(issue) for issue in exc.issues]
    return []


def test_the_distribution_is_installed(installed_registry: Registry) -> None:
    assert_plugin_installed("plugtrain-sparsity", installed_registry)


def test_algorithms_and_callback_are_registered(installed_registry: Registry) -> None:
    names = installed_registry.names("sparsity")
    assert {"Static", "GMP", "SET", "RigL"} <= set(names)
    assert "LogSparsity" in installed_registry.names("callback")
    component = installed_registry.lookup("sparsity", "rigl")
    assert component.target == "plugtrain_sparsity.rigl:RigL"


@pytest.mark.parametrize("written", ["static", "STATIC", "gmp", "Set", "rigl", "RIGL"])
def test_algorithm_names_match_case_insensitively(
    installed_registry: Registry, written: str
) -> None:
    component = installed_registry.lookup("sparsity", written)
    assert component.name.lower() == written.lower()


def test_defaults_are_filled_in(installed_registry: Registry) -> None:
    schema = _schema(installed_registry, "sparsity", "RigL")
    arguments = validated_arguments(schema, {"schedule": 0.75}, owner="RigL")
    assert arguments == {
        "sparsity": 0.75,
        "init_method": "random",
        "update": None,
        "drop_fraction": 0.3,
        "balance_in_groups": None,
        "balance_out_groups": None,
    }


def test_gpt3_rigl_group_is_valid(installed_registry: Registry) -> None:
    arguments = {
        "sparsity": 0.75,
        "init_method": "random",
        "drop_fraction": GPT3_DROP,
        "update": {"freq": 100, "stop": 3584},
    }
    assert _problems(installed_registry, "RigL", arguments) == []
    assert _problems(installed_registry, "SET", arguments) == []


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        (
            "Static",
            {"sparsity": [0.1, 0.2]},
            "Static.sparsity: Static sparsity algorithm only supports constant sparsity",
        ),
        (
            "Static",
            {"sparsity": {"type": "linear", "init": 0, "slope": 0.1}},
            "Static.sparsity: Static sparsity algorithm only supports constant sparsity",
        ),
        ("Static", {"sparsity": 1.0}, "Invalid sparsity level 1.0. Must be 0.0 <= s < 1.0"),
        ("Static", {"sparsity": -0.1}, "Invalid sparsity level -0.1. Must be 0.0 <= s < 1.0"),
        ("Static", {}, "missing required argument 'sparsity'"),
        ("Static", {"sparsity": 0.5, "update": {"freq": 2}}, "unknown argument 'update'"),
        (
            "GMP",
            {"sparsity": 0.5},
            "Configured with constant sparsity 0.5. This is not valid, because the sparsity "
            "pattern would not change during training. For a static sparsity pattern, use "
            '`algorithm="static".`',
        ),
        (
            "GMP",
            {"sparsity": {"type": "constant", "value": 0.5}},
            "Configured with constant sparsity 0.5.",
        ),
        ("GMP", {"sparsity": [0.1], "drop_fraction": 0.3}, "unknown argument 'drop_fraction'"),
        ("SET", {"sparsity": {"init": 0.3}}, "SET.sparsity: Must specify `type`"),
        (
            "SET",
            {"sparsity": {"type": "polynomial"}},
            "Unknown schedule type 'polynomial'. Valid types: constant, cosine, cycling, exp",
        ),
        (
            "RigL",
            {"sparsity": 0.5, "drop_fraction": {"type": "cosine", "init": 0.3, "period": 9}},
            "RigL.drop_fraction: cosine schedule got an unexpected argument 'period'",
        ),
        ("RigL", {"sparsity": 0.5, "drop_fraction": 1.5}, "Invalid drop_fraction 1.5"),
        ("RigL", {"sparsity": 0.5, "update": {"start": 5}}, "Invalid `update`: {'start': 5}."),
        (
            "RigL",
            {"sparsity": 0.5, "init_method": "Random"},
            'Unknown `init_method`: "Random". Valid options are one of the built-in '
            "['random', 'topk', 'from_zeros', 'checkerboard'] or a function with signature",
        ),
        (
            "RigL",
            {"sparsity": 0.5, "balance_in_groups": 2, "balance_out_groups": 4},
            "Only one of `balance_in_groups` and `balance_out_groups` can be specified at a time.",
        ),
        ("RigL", {"sparsity": 0.5, "balance_out_groups": 0}, "must be > 0, got 0"),
        (
            "RigL",
            {"sparsity": 0.5, "schedule": 0.5},
            "'schedule' and 'sparsity' name the same argument",
        ),
    ],
)
def test_bad_arguments_are_refused(
    installed_registry: Registry, name: str, arguments: dict[str, Any], expected: str
) -> None:
    problems = _problems(installed_registry, name, arguments)
    assert len(problems) == 1, problems
    assert expected in problems[0]


def test_python_callables_are_accepted(installed_registry: Registry) -> None:
    def init(param: Any, sparsity: Any, score_shaper: Any = None, device: Any = None) -> Any:
        return param

    arguments = {"sparsity": lambda step: 0.5, "init_method": init, "update": lambda s: True}
    assert _problems(installed_registry, "RigL", arguments) == []


def test_curves_of_the_gpt3_rigl_group(installed_registry: Registry) -> None:
    schema: Any = _schema(installed_registry, "sparsity", "RigL")
    arguments = validated_arguments(
        schema,
        {"sparsity": 0.75, "drop_fraction": GPT3_DROP, "update": {"freq": 100, "stop": 3584}},
        owner="RigL",
    )
    curves = schema.curves(arguments)
    assert set(curves) == {"sparsity", "drop_fraction"}
    assert curves["sparsity"].at(1000) == 0.75
    assert curves["drop_fraction"].at(0) == pytest.approx(0.3, abs=1e-15)
    assert curves["drop_fraction"].at(1792) == pytest.approx(0.15, abs=1e-15)


def test_gmp_sparsity_curve_is_clamped(installed_registry: Registry) -> None:
    schema: Any = _schema(installed_registry, "sparsity", "GMP")
    linear = {"type": "linear", "init": 0.0, "slope": 0.25}
    curves = schema.curves(validated_arguments(schema, {"sparsity": linear}, owner="GMP"))
    assert [curves["sparsity"].at(t) for t in (0, 2, 4, 8)] == [0.0, 0.5, 1.0, 1.0]


def test_plugin_module_and_schemas_do_not_import_torch() -> None:
    code = (
        "import sys, plugtrain_sparsity.plugin, plugtrain_sparsity.schemas; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
