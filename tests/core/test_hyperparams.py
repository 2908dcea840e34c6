"""Sparsity hyperparameter schedules and update schedules (plugtrain.hyperparams), torch-free."""

from __future__ import annotations

import math

import pytest

from plugtrain.hyperparams import (
    ConstantHyperParameter,
    CosineHyperParameter,
    CyclingHyperParameter,
    ExpHyperParameter,
    FreqUpdateSchedule,
    HyperParameterError,
    LambdaHyperParameter,
    LinearHyperParameter,
    ListUpdateSchedule,
    PowerHyperParameter,
    make_schedule,
    make_update_schedule,
)

# -- value schedules: values written out ---------------------------------------------------------


def test_a_number_is_a_constant_schedule() -> None:
    schedule = make_schedule(0.75)
    assert isinstance(schedule, ConstantHyperParameter)
    assert [schedule(t) for t in (0, 1, 1000)] == [0.75, 0.75, 0.75]
    assert make_schedule(1)(5) == 1.0


def test_constant_mapping_case_insensitive_type() -> None:
    assert make_schedule({"type": "Constant", "value": 0.5})(7) == 0.5


def test_linear_schedule_values() -> None:
    schedule = make_schedule({"type": "linear", "init": 0.1, "slope": 0.01})
    assert isinstance(schedule, LinearHyperParameter)
    assert schedule(0) == pytest.approx(0.1, abs=1e-15)
    assert schedule(10) == pytest.approx(0.2, abs=1e-15)
    # Not clamped: the algorithm clamps sparsity where it uses it.
    assert schedule(100) == pytest.approx(1.1, abs=1e-15)


def test_exp_schedule_values() -> None:
    schedule = make_schedule({"type": "EXP", "init": 0.0, "gamma": -0.01})
    assert isinstance(schedule, ExpHyperParameter)
    assert schedule(0) == 0.0
    # 1 - e^-1 with final defaulting to 1
    assert schedule(100) == pytest.approx(0.6321205588285577, rel=1e-12)
    other = make_schedule({"type": "exp", "init": 0.1, "gamma": -0.5, "final": 0.9})
    assert other(2) == pytest.approx(0.6056964470628461, rel=1e-12)


def test_power_schedule_values() -> None:
    schedule = make_schedule({"type": "power", "init": 0.5, "beta": 0.9})
    assert isinstance(schedule, PowerHyperParameter)
    assert schedule(0) == 0.5
    assert schedule(3) == pytest.approx(0.3645, rel=1e-12)


def test_cosine_schedule_gpt3_drop_fraction() -> None:
    """The GPT-3 RigL drop_fraction: init 0.3, half_period 3584, minimum 0."""
    schedule = make_schedule({"type": "cosine", "init": 0.3, "half_period": 3584})
    assert isinstance(schedule, CosineHyperParameter)
    assert schedule(0) == pytest.approx(0.3, abs=1e-15)
    assert schedule(1792) == pytest.approx(0.15, abs=1e-15)
    assert schedule(3500) == pytest.approx(0.00040643149819646895, rel=1e-9)
    assert schedule(3584) == pytest.approx(0.0, abs=1e-15)
    # Periodic, not clamped: it comes back up.
    assert schedule(7168) == pytest.approx(0.3, abs=1e-15)


def test_cosine_schedule_with_minimum() -> None:
    schedule = make_schedule({"type": "cosine", "init": 0.8, "half_period": 4, "minimum": 0.2})
    assert schedule(1) == pytest.approx(0.5 + 0.3 * math.cos(math.pi / 4), rel=1e-12)
    assert schedule(1) == pytest.approx(0.7121320343559643, rel=1e-12)
    assert schedule(4) == pytest.approx(0.2, abs=1e-15)


def test_a_list_is_a_cycling_schedule_that_moves_on_update_steps_only() -> None:
    schedule = make_schedule([0.5, 0.6, 0.7])
    assert isinstance(schedule, CyclingHyperParameter)
    seen = []
    for update in (False, True, False, True, True, True):
        seen.append(schedule(0))
        schedule.update(update)
    assert seen == [0.5, 0.5, 0.6, 0.6, 0.7, 0.5]
    assert schedule.state_dict() == {"index": 1}


def test_cycling_state_round_trips() -> None:
    schedule = make_schedule({"type": "cycling", "values": [0.1, 0.2, 0.3]})
    schedule.update(True)
    schedule.update(True)
    fresh = make_schedule([0.1, 0.2, 0.3])
    fresh.load_state_dict(schedule.state_dict())
    assert fresh(0) == 0.3
    fresh.update(True)
    assert fresh(0) == 0.1


def test_cycling_state_out_of_range_is_refused() -> None:
    schedule = make_schedule([0.1, 0.2])
    with pytest.raises(HyperParameterError, match=r"index 2 is outside 0\.\.1"):
        schedule.load_state_dict({"index": 2})


def test_stateless_schedules_have_empty_state() -> None:
    for spec in (0.5, {"type": "linear", "init": 0, "slope": 1}, lambda t: 0.1):
        schedule = make_schedule(spec)
        assert schedule.state_dict() == {}
        schedule.update(True)
        schedule.load_state_dict({})


def test_a_callable_is_a_lambda_schedule() -> None:
    schedule = make_schedule(lambda t: 0.1 * t)
    assert isinstance(schedule, LambdaHyperParameter)
    assert schedule(3) == pytest.approx(0.3, abs=1e-15)


def test_a_built_schedule_is_returned_as_is() -> None:
    built = LinearHyperParameter(0.0, 0.5)
    assert make_schedule(built) is built


# -- value schedules: errors ---------------------------------------------------------------------


def test_mapping_without_type() -> None:
    with pytest.raises(HyperParameterError, match="Must specify `type`") as info:
        make_schedule({"init": 0.1, "slope": 0.1})
    assert info.value.key is None


def test_unknown_type_names_the_valid_types() -> None:
    with pytest.raises(HyperParameterError) as info:
        make_schedule({"type": "polynomial", "init": 0.1})
    assert str(info.value).startswith(
        "Unknown schedule type 'polynomial'. Valid types: constant, cosine, cycling, exp, "
        "linear, power"
    )
    assert info.value.key == "type"


def test_unknown_argument_is_named_and_a_type_error() -> None:
    with pytest.raises(TypeError, match="linear schedule got an unexpected argument 'gamma'") as e:
        make_schedule({"type": "linear", "init": 0.1, "slope": 0.1, "gamma": 2})
    assert isinstance(e.value, HyperParameterError)
    assert e.value.key == "gamma"
    assert "its arguments are: init, slope" in str(e.value)


def test_missing_argument_is_named() -> None:
    with pytest.raises(HyperParameterError, match="cosine schedule needs 'half_period'"):
        make_schedule({"type": "cosine", "init": 0.3})


def test_argument_of_wrong_type_is_named() -> None:
    with pytest.raises(HyperParameterError, match="exp schedule: gamma must be a number") as info:
        make_schedule({"type": "exp", "init": 0.0, "gamma": "fast"})
    assert info.value.key == "gamma"


def test_zero_half_period_refused() -> None:
    with pytest.raises(HyperParameterError, match="half_period must be > 0"):
        make_schedule({"type": "cosine", "init": 0.3, "half_period": 0})


def test_other_values_list_the_options() -> None:
    with pytest.raises(HyperParameterError) as info:
        make_schedule("0.75")
    text = str(info.value)
    assert text.startswith("Unhandled '0.75'. Options are:\n")
    assert "- a number (int or float)" in text
    assert "- a list of numbers" in text
    assert "- a callable" in text
    assert "- a HyperParameterSchedule" in text
    assert "['constant', 'cosine', 'cycling', 'exp', 'linear', 'power']" in text
    with pytest.raises(HyperParameterError, match="Unhandled True"):
        make_schedule(True)
    with pytest.raises(HyperParameterError, match="Unhandled None"):
        make_schedule(None)


def test_empty_cycling_and_non_numbers_refused() -> None:
    with pytest.raises(HyperParameterError, match="values must not be empty"):
        make_schedule([])
    with pytest.raises(HyperParameterError, match=r"values\[1\] must be a number"):
        make_schedule([0.1, "x"])


# -- closed forms (plot) -------------------------------------------------------------------------


def test_curve_of_a_pure_schedule_is_its_values() -> None:
    schedule = make_schedule({"type": "linear", "init": 0.0, "slope": 0.25})
    curve = schedule.curve()
    assert [curve.at(t) for t in range(4)] == [0.0, 0.25, 0.5, 0.75]


def test_curve_of_cycling_follows_the_update_steps() -> None:
    schedule = make_schedule([0.1, 0.2, 0.3])
    updates = make_update_schedule({"freq": 2})
    # Update steps 2, 4, 6...: the value at step t uses the moves of steps 1..t-1.
    curve = schedule.curve(updates)
    assert [curve.at(t) for t in range(1, 8)] == [0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.1]
    # Sparsity that starts sparse moves once before step 1.
    started = schedule.curve(updates, advances=1)
    assert [started.at(t) for t in range(5)] == [0.1, 0.2, 0.2, 0.3, 0.3]
    assert curve.at(0) == 0.1
    # Matches stepping a real schedule the way an algorithm does.
    live = make_schedule([0.1, 0.2, 0.3])
    stepped = []
    for t in range(1, 8):
        stepped.append(live(t))
        live.update(updates(t))
    assert stepped == [curve.at(t) for t in range(1, 8)]


# -- update schedules ----------------------------------------------------------------------------


def test_no_update_means_every_step() -> None:
    schedule = make_update_schedule(None)
    assert all(schedule(t) for t in range(20))


def test_freq_from_zero() -> None:
    schedule = make_update_schedule({"freq": 3})
    assert schedule.update_steps(10) == [3, 6, 9]
    assert schedule(0)


def test_freq_with_start_and_stop() -> None:
    schedule = make_update_schedule({"freq": 4, "start": 2, "stop": 15})
    assert schedule.update_steps(20) == [2, 6, 10, 14]
    # Step 0 is before start: training starts dense.
    assert not schedule(0)


def test_gpt3_example_freq_100_stop_3584() -> None:
    schedule = make_update_schedule({"freq": 100, "stop": 3584})
    assert schedule.update_steps(4778) == list(range(100, 3501, 100))
    assert schedule.update_steps(4778)[-1] == 3500
    assert not schedule(3600)


def test_steps_form() -> None:
    schedule = make_update_schedule({"steps": [5, 1, 9]})
    assert isinstance(schedule, ListUpdateSchedule)
    assert schedule.update_steps(12) == [1, 5, 9]
    assert not schedule(0)
    assert make_update_schedule({"steps": [0, 3]})(0)


def test_callable_update_schedule() -> None:
    schedule = make_update_schedule(lambda step: step in (2, 3))
    assert schedule.update_steps(5) == [2, 3]


def test_count_before_matches_counting() -> None:
    for spec in (
        None,
        {"freq": 3},
        {"freq": 4, "start": 2, "stop": 15},
        {"freq": 5, "start": 7},
        {"freq": 1, "stop": 1},
        {"steps": [0, 1, 4, 9]},
    ):
        schedule = make_update_schedule(spec)
        for step in range(25):
            expected = sum(1 for s in range(1, step) if schedule(s))
            assert schedule.count_before(step) == expected, (spec, step)


def test_last_update_matches_searching() -> None:
    for spec in (
        None,
        {"freq": 3},
        {"freq": 4, "start": 2, "stop": 15},
        {"freq": 5, "start": 7},
        {"freq": 1, "stop": 1},
        {"steps": [0, 1, 4, 9]},
        {"steps": [0]},
    ):
        schedule = make_update_schedule(spec)
        for step in range(25):
            expected = next((s for s in range(step, 0, -1) if schedule(s)), None)
            assert schedule.last_update(step) == expected, (spec, step)
    assert make_update_schedule({"freq": 100, "stop": 3584}).last_update(4778) == 3500


def test_a_built_update_schedule_is_returned_as_is() -> None:
    built = FreqUpdateSchedule(2)
    assert make_update_schedule(built) is built


@pytest.mark.parametrize("update", [{"start": 10}, {}, "every", 3, [1, 2]])
def test_invalid_update_lists_the_options(update: object) -> None:
    with pytest.raises(HyperParameterError) as info:
        make_update_schedule(update)
    text = str(info.value)
    assert text.startswith(f"Invalid `update`: {update!r}. Valid options are:\n")
    assert "- None (or no `update`): every step" in text
    assert "- {steps: [int, ...]}" in text
    assert "- a callable step -> bool (Python only)" in text


def test_update_unknown_key_named() -> None:
    with pytest.raises(TypeError, match="update got an unexpected key 'every'") as info:
        make_update_schedule({"freq": 2, "every": 3})
    assert isinstance(info.value, HyperParameterError)
    assert info.value.key == "every"


def test_update_steps_with_another_key_refused() -> None:
    with pytest.raises(HyperParameterError, match="update with `steps` takes no other key, got"):
        make_update_schedule({"steps": [1], "freq": 2})


@pytest.mark.parametrize(
    ("update", "key", "text"),
    [
        ({"freq": 0}, "freq", "update freq must be >= 1, got 0"),
        ({"freq": 1.5}, "freq", "update freq must be an integer, got float 1.5"),
        ({"freq": 2, "start": -1}, "start", "update start must be >= 0, got -1"),
        ({"freq": 2, "stop": "end"}, "stop", "update stop must be an integer"),
        ({"steps": [1, True]}, "steps", r"update steps\[1\] must be an integer"),
        ({"steps": 5}, "steps", "update steps must be a list of step numbers"),
    ],
)
def test_update_values_checked(update: dict[str, object], key: str, text: str) -> None:
    with pytest.raises(HyperParameterError, match=text) as info:
        make_update_schedule(update)
    assert info.value.key == key


def test_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, plugtrain.hyperparams as h; h.make_schedule([0.1]); "
        "h.make_update_schedule({'freq': 2}); assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
