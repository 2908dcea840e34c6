"""Sequential, chained and per-group scaled schedulers, including the seed's examples."""

from __future__ import annotations

import math

import pytest

import plugtrain
from plugtrain.optim import lr_scheduler, weight_decay_scheduler

SEED_LINEAR = {"initial_learning_rate": 0.01, "end_learning_rate": 0.001, "total_iters": 500}
SEED_COSINE = {"initial_learning_rate": 0.001, "end_learning_rate": 0.0001, "total_iters": 500}


def seed_expected(e: int) -> float:
    if e < 500:
        return 0.01 + (0.001 - 0.01) * e / 500
    k = min(e - 500, 500)
    return 0.0001 + (0.001 - 0.0001) * 0.5 * (1 + math.cos(math.pi * k / 500))


STEPS = [0, 1, 250, 499, 500, 501, 750, 999, 1000, 1001, 5000]


def test_seed_sequential_from_run_file_mappings(helpers):
    optimizer = helpers.build_optimizer()
    scheduler = plugtrain.resolve("scheduler", "SequentialLR")(
        optimizer, schedulers=[{"LinearLR": SEED_LINEAR}, {"CosineDecayLR": SEED_COSINE}]
    )
    assert scheduler.curve.length == 1000
    found = helpers.run(scheduler, STEPS)
    assert found == pytest.approx({e: seed_expected(e) for e in STEPS}, rel=1e-12)


def test_seed_sequential_from_python_objects_derives_milestone_500(helpers):
    """The seed's Python example, with ``cstorch`` replaced by ``plugtrain``."""
    optimizer = helpers.build_optimizer()
    scheduler = lr_scheduler.SequentialLR(
        optimizer,
        schedulers=[
            lr_scheduler.LinearLR(optimizer, **SEED_LINEAR),
            lr_scheduler.CosineDecayLR(optimizer, **SEED_COSINE),
        ],
    )
    assert [scheduler.value(e) for e in (499, 500)] == pytest.approx([0.001018, 0.001])
    found = helpers.run(scheduler, STEPS)
    assert found == pytest.approx({e: seed_expected(e) for e in STEPS}, rel=1e-12)


def test_seed_cosine_decay_wd_only_touches_bias_params(helpers):
    optimizer = helpers.build_optimizer(..., "bias_params", weight_decay=0.5)
    scheduler = weight_decay_scheduler.CosineDecayWD(
        optimizer,
        initial_weight_decay=0.01,
        end_weight_decay=0.001,
        total_iters=100,
        param_group_tags="bias_params",
    )
    assert scheduler.group_indices == [1]
    for e in range(120):
        expected = 0.001 + 0.009 * 0.5 * (1 + math.cos(math.pi * min(e, 100) / 100))
        assert optimizer.param_groups[1]["weight_decay"] == pytest.approx(expected, rel=1e-12)
        assert optimizer.param_groups[0]["weight_decay"] == 0.5
        assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.5]
        scheduler.step()


def test_explicit_milestones_and_many_children(helpers):
    children = [{"ConstantLR": {"learning_rate": float(i)}} for i in range(1, 41)]
    milestones = [3 * i for i in range(1, 40)]
    scheduler = plugtrain.resolve("scheduler", "SequentialLR")(
        helpers.build_optimizer(), schedulers=children, milestones=milestones
    )
    assert [scheduler.value(e) for e in (0, 2, 3, 59, 60, 116, 117, 10**6)] == [
        1,
        1,
        2,
        20,
        21,
        39,
        40,
        40,
    ]


def test_children_run_on_their_own_clock(helpers):
    scheduler = plugtrain.resolve("scheduler", "SequentialLR")(
        helpers.build_optimizer(),
        schedulers=[
            {"ConstantLR": {"learning_rate": 1.0}},
            {"StepLR": {"initial_learning_rate": 1.0, "step_size": 2, "gamma": 0.5}},
        ],
        milestones=[5],
    )
    assert [scheduler.value(e) for e in range(4, 10)] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.25]


def test_nested_sequential_equals_its_flattened_form(helpers):
    warm = {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 1.0, "total_iters": 7}}
    hold = {"ConstantLR": {"learning_rate": 1.0, "total_iters": 5}}
    decay = {
        "CosineDecayLR": {"initial_learning_rate": 1.0, "end_learning_rate": 0.1, "total_iters": 11}
    }
    tail = {"ExponentialLR": {"initial_learning_rate": 0.1, "total_iters": 3, "decay_rate": 0.5}}
    build = plugtrain.resolve("scheduler", "SequentialLR")
    inner = {"SequentialLR": {"schedulers": [hold, decay]}}
    nested = build(helpers.build_optimizer(), schedulers=[warm, inner, tail])
    deep = build(
        helpers.build_optimizer(),
        schedulers=[{"SequentialLR": {"schedulers": [warm, inner]}}, tail],
    )
    flat = build(helpers.build_optimizer(), schedulers=[warm, hold, decay, tail])
    steps = range(40)
    expected = helpers.run(flat, steps)
    assert helpers.run(nested, steps) == expected
    assert helpers.run(deep, steps) == expected
    # The nested children advance: the cosine part is not frozen at its first value.
    assert len({expected[e] for e in range(12, 23)}) == 11


def test_sequential_wd_takes_weight_decay_children(helpers):
    optimizer = helpers.build_optimizer()
    scheduler = plugtrain.resolve("scheduler", "SequentialWD")(
        optimizer,
        schedulers=[
            {"ConstantWD": {"val": 0.1, "total_iters": 2}},
            {"LinearWD": {"initial_weight_decay": 0.1, "end_weight_decay": 0.0, "total_iters": 2}},
        ],
    )
    assert helpers.run(scheduler, range(6)) == pytest.approx(
        {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.05, 4: 0.0, 5: 0.0}
    )
    assert optimizer.param_groups[0]["lr"] == 0.5


def test_chained_multiplies_children_from_python_and_from_mappings(helpers):
    optimizer = helpers.build_optimizer()
    linear = {"initial_learning_rate": 1.0, "end_learning_rate": 0.5, "total_iters": 10}
    step = {"initial_learning_rate": 4.0, "step_size": 3, "gamma": 0.1}
    chained_lr = plugtrain.resolve("scheduler", "ChainedScheduler")
    built = chained_lr(
        [lr_scheduler.LinearLR(optimizer, **linear), lr_scheduler.StepLR(optimizer, **step)]
    )
    assert type(built).__name__ == "ChainedLR"
    expected = {e: (1.0 - 0.05 * min(e, 10)) * 0.1 ** (e // 3) for e in range(15)}
    assert helpers.run(built, range(15)) == pytest.approx(expected, rel=1e-12)
    from_yaml = chained_lr(
        helpers.build_optimizer(), schedulers=[{"LinearLR": linear}, {"StepLR": step}]
    )
    assert helpers.run(from_yaml, range(15)) == pytest.approx(expected, rel=1e-12)


def test_scale_per_param_multiplies_by_each_groups_factor(helpers):
    optimizer = helpers.build_optimizer("a", "b", ...)
    optimizer.param_groups[0]["adjust_learning_rate"] = 0.5
    optimizer.param_groups[1]["adjust_learning_rate"] = 4.0
    scheduler = plugtrain.resolve("scheduler", "ScalePerParamLR")(
        optimizer,
        scheduler={"StepLR": {"initial_learning_rate": 1.0, "step_size": 2, "gamma": 0.1}},
    )
    for e in range(6):
        value = 0.1 ** (e // 2)
        got = [g["lr"] for g in optimizer.param_groups]
        assert got == pytest.approx([0.5 * value, 4.0 * value, value], rel=1e-12)
        assert scheduler.get_last_lr() == got
        scheduler.step()


def test_wrapper_tags_are_pushed_down_to_children(helpers):
    optimizer = helpers.build_optimizer("a", "b", ...)
    scheduler = plugtrain.resolve("scheduler", "SequentialLR")(
        optimizer,
        schedulers=[
            {"ConstantLR": {"learning_rate": 0.1, "total_iters": 2}},
            {"ConstantLR": {"learning_rate": 0.2}},
        ],
        param_group_tags="b",
    )
    assert scheduler.group_indices == [1]
    assert [child.group_indices for child in scheduler.children] == [[1], [1]]
    assert [child.param_group_tags for child in scheduler.children] == ["b", "b"]
    assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.1, 0.5]
    scheduler.step()
    scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == [0.5, 0.2, 0.5]


def test_python_children_without_tags_follow_the_wrapper(helpers):
    optimizer = helpers.build_optimizer("a", "b")
    child = lr_scheduler.ConstantLR(optimizer, learning_rate=0.3)
    scheduler = lr_scheduler.ScalePerParamLR(optimizer, scheduler=child, param_group_tags="a")
    assert child.group_indices == scheduler.group_indices == [0]
