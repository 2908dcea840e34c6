"""Argument schemas: types, constraints, aliases, every problem reported at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs
import pytest

from plugtrain.errors import ConfigError
from plugtrain.schema import arg, arg_infos, check_arguments, matches_type, validated_arguments


@attrs.frozen
class Args:
    """A schema exercising every feature."""

    lr: float = arg(help="learning rate", ge=0, aliases=("learning_rate",))
    betas: tuple[float, float] = arg((0.9, 0.999), ge=0, lt=1)
    mode: Literal["a", "b"] = arg("a")
    count: int = arg(1, gt=0)
    tags: str | list[str] | None = arg(None)
    fn: Callable | None = arg(None)

    @staticmethod
    def cross_check(arguments):
        if arguments["mode"] == "b" and arguments["count"] < 2:
            yield "mode 'b' needs count >= 2"


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (1, float, True),
        (1.5, float, True),
        (True, float, False),
        (True, int, False),
        (2, int, True),
        ([0.9, 0.99], tuple[float, float], True),
        ([0.9], tuple[float, float], False),
        ([1, 2, 3], tuple[int, ...], True),
        (None, str | None, True),
        ("x", Literal["x", "y"], True),
        ("z", Literal["x", "y"], False),
        ({"a": 1}, dict[str, int], True),
        ({"a": "b"}, dict[str, int], False),
        (len, Callable, True),
    ],
)
def test_matches_type(value, annotation, expected):
    assert matches_type(value, annotation) is expected


def test_valid_arguments_have_no_problem():
    assert check_arguments(Args, {"lr": 0.1, "betas": [0.8, 0.9], "mode": "b", "count": 2}) == []


def test_every_problem_is_reported_at_once():
    problems = dict(
        check_arguments(Args, {"lr": -1, "betas": [0.9, 1.5], "mode": "c", "count": "3", "x": 1})
    )
    assert problems["lr"] == "must be >= 0, got -1"
    assert problems["betas"] == "must be < 1, got [0.9, 1.5]"
    assert problems["mode"].startswith("must be of type Literal")
    assert problems["count"] == "must be of type int, got str '3'"
    assert problems["x"].startswith("unknown argument 'x'.")


def test_a_missing_required_argument_is_named():
    assert check_arguments(Args, {}) == [("lr", "missing required argument 'lr'")]


def test_an_unknown_argument_gets_a_suggestion():
    ((key, message),) = check_arguments(Args, {"lr": 1, "cuont": 2})
    assert key == "cuont"
    assert "Did you mean 'count'?" in message


def test_aliases_are_accepted_but_not_both_names():
    assert check_arguments(Args, {"learning_rate": 0.1}) == []
    ((key, message),) = check_arguments(Args, {"lr": 0.1, "learning_rate": 0.2})
    assert key == "learning_rate"
    assert "name the same argument" in message


def test_cross_checks_run_after_field_checks():
    assert check_arguments(Args, {"lr": 1, "mode": "b"}) == [("", "mode 'b' needs count >= 2")]


def test_validated_arguments_fill_defaults_and_rename_aliases():
    arguments = validated_arguments(Args, {"learning_rate": 0.5}, owner="Opt")
    assert arguments == {
        "lr": 0.5,
        "betas": (0.9, 0.999),
        "mode": "a",
        "count": 1,
        "tags": None,
        "fn": None,
    }


def test_validated_arguments_raise_a_value_error_naming_owner_argument_and_value():
    with pytest.raises(ValueError, match=r"Opt\.lr: must be >= 0, got -2") as info:
        validated_arguments(Args, {"lr": -2}, owner="Opt")
    assert isinstance(info.value, ConfigError)


def test_arg_infos_describe_types_defaults_and_constraints():
    infos = {info.name: info for info in arg_infos(Args)}
    assert infos["lr"].required
    assert infos["lr"].aliases == ("learning_rate",)
    assert infos["betas"].type == "tuple[float, float]"
    assert infos["betas"].constraint == ">= 0, < 1"
    assert infos["count"].default == 1


def test_constructor_signature_follows_the_schema():
    import inspect

    from plugtrain.schema import REQUIRED, constructor_signature

    signature = constructor_signature(Args, ("params",))
    parameters = list(signature.parameters.values())
    assert [p.name for p in parameters] == [
        "params",
        "lr",
        "betas",
        "mode",
        "count",
        "tags",
        "fn",
        "kwargs",
    ]
    assert parameters[0].default is inspect.Parameter.empty
    assert signature.parameters["lr"].default is REQUIRED
    assert signature.parameters["betas"].default == (0.9, 0.999)
    assert parameters[-1].kind is inspect.Parameter.VAR_KEYWORD  # Args has an alias


def test_bind_arguments_keeps_only_what_was_given():
    from plugtrain.schema import bind_arguments, constructor_signature

    signature = constructor_signature(Args, ("params",))
    bound = bind_arguments(signature, ["P", 0.5], {"count": 2, "learning_rat": 1})
    assert bound == {"params": "P", "lr": 0.5, "count": 2, "learning_rat": 1}
    assert bind_arguments(signature, ["P"], {"learning_rate": 0.1}) == {
        "params": "P",
        "learning_rate": 0.1,
    }
    with pytest.raises(TypeError):
        bind_arguments(signature, ["P", 0.1], {"lr": 0.2})


@attrs.frozen
class RuleArgs:
    """A schema whose rules name the arguments they are about."""

    low: float = arg(0.0, aliases=("minimum",))
    high: float = arg(1.0)
    mode: str = arg("a")

    @staticmethod
    def cross_check(arguments):
        from plugtrain.schema import about

        if arguments["low"] > arguments["high"]:
            yield about(("high", "low"), "high must not be below low")
        if arguments["mode"] == "b":
            yield about("mode", "mode 'b' is retired")
        if arguments["mode"] == "c":
            yield "mode 'c' needs the whole component"


def test_a_cross_check_message_is_keyed_by_the_first_given_argument_it_names():
    from plugtrain.schema import argument_problems

    assert argument_problems(RuleArgs, {"low": 3.0, "high": 2.0}) == [
        ("high", "high must not be below low", True)
    ]
    # high left at its default: the message goes to low, under the alias it was written as.
    assert check_arguments(RuleArgs, {"minimum": 3.0}) == [
        ("minimum", "high must not be below low")
    ]
    assert check_arguments(RuleArgs, {"mode": "b"}) == [("mode", "mode 'b' is retired")]
    assert check_arguments(RuleArgs, {"mode": "c"}) == [("", "mode 'c' needs the whole component")]


def test_a_named_argument_left_at_its_default_places_the_message_at_the_component():
    @attrs.frozen
    class Defaults:
        """A rule that fires on defaults."""

        x: int = arg(1)

        @staticmethod
        def cross_check(arguments):
            from plugtrain.schema import about

            yield about("x", "x is never right")

    assert check_arguments(Defaults, {}) == [("", "x is never right")]
    with pytest.raises(ConfigError, match=r"^Defaults: x is never right$"):
        validated_arguments(Defaults, {}, owner="Defaults")


def test_a_bad_value_given_under_an_alias_is_keyed_by_the_alias():
    from plugtrain.schema import argument_problems

    assert argument_problems(Args, {"learning_rate": -1}) == [
        ("learning_rate", "must be >= 0, got -1", False)
    ]
    with pytest.raises(ConfigError, match=r"Opt\.learning_rate: must be >= 0, got -1"):
        validated_arguments(Args, {"learning_rate": -1}, owner="Opt")


@attrs.frozen
class MachineArgs:
    """Numbers and strings training has to use."""

    rate: float | None = arg(None)
    pair: tuple[float, float] = arg((0.0, 0.0))
    steps: int = arg(1)
    seed: int = arg(0, ge=0, le=2**64 - 1, finite=False)
    path: str = arg("")
    names: list[str] = arg([])
    fn: Callable[[int], float] | None = arg(None)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"rate": float("inf")}, ("rate", "must be a finite number, got inf")),
        ({"rate": float("nan")}, ("rate", "must be a finite number, got nan")),
        (
            {"rate": 1e300},
            ("rate", "must be within float32's range (|x| <= 3.402823e+38), got 1e+300"),
        ),
        (
            {"rate": -(10**39)},
            ("rate", f"must be within float32's range (|x| <= 3.402823e+38), got {-(10**39)}"),
        ),
        ({"pair": (0.5, float("-inf"))}, ("pair", "must be a finite number, got (0.5, -inf)")),
        (
            {"steps": 2**63},
            ("steps", f"must fit a 64-bit integer (|x| <= {2**63 - 1}), got {2**63}"),
        ),
        ({"seed": 2**64}, ("seed", f"must be <= {2**64 - 1}, got {2**64}")),
        ({"path": "a\0b"}, ("path", "must not contain a NUL character (\\0), got 'a\\x00b'")),
        (
            {"names": ["ok", "n\0"]},
            ("names", "must not contain a NUL character (\\0), got ['ok', 'n\\x00']"),
        ),
    ],
    ids=[
        "inf",
        "nan",
        "1e300",
        "huge_int_as_float",
        "inf_in_tuple",
        "int64",
        "seed",
        "nul",
        "nul_in_list",
    ],
)
def test_values_training_cannot_use_are_problems(arguments, problem):
    assert check_arguments(MachineArgs, arguments) == [problem]


def test_values_at_the_machine_limits_are_accepted():
    edge = {
        "rate": 3.4028234663852886e38,
        "pair": (-3.4e38, 1e-45),
        "steps": -(2**63 - 1),
        "seed": 2**64 - 1,
        "path": "a/b c",
        "fn": lambda step: float("inf"),
    }
    assert check_arguments(MachineArgs, edge) == []


def test_python_callers_get_the_same_finite_check():
    with pytest.raises(ConfigError, match=r"Owner\.rate: must be a finite number, got inf"):
        validated_arguments(MachineArgs, {"rate": float("inf")}, owner="Owner")
