"""param_group_tags selection, and state that round-trips mid-schedule."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import plugtrain

LINEAR = {"initial_learning_rate": 1.0, "end_learning_rate": 0.0, "total_iters": 10}


def linear(optimizer, **extra):
    return plugtrain.resolve("scheduler", "LinearLR")(optimizer, **LINEAR, **extra)


@pytest.mark.parametrize(
    ("param_group_tags", "targeted"),
    [
        (None, [0, 1, 2, 3, 4, 5]),
        ("a", [0, 2, 3]),
        (["a"], [0, 2, 3]),
        ({"b", "c"}, [1, 2, 3]),
        (("c",), [3]),
        ([None], [4, 5]),
        (["c", None], [3, 4, 5]),
    ],
)
def test_tags_select_groups(helpers, param_group_tags, targeted):
    # Group tags written as a string, a list, a set, absent, and None.
    optimizer = helpers.build_optimizer("a", ["b"], {"a", "b"}, ["a", "c"], ..., None)
    scheduler = linear(optimizer, param_group_tags=param_group_tags)
    assert scheduler.group_indices == targeted
    assert scheduler.param_key == "lr"
    scheduler.step()
    assert [i for i, g in enumerate(optimizer.param_groups) if g["lr"] == 0.9] == targeted
    assert all(g["lr"] == 0.5 for i, g in enumerate(optimizer.param_groups) if i not in targeted)


def test_tags_that_select_nothing_list_the_tags_present(helpers):
    optimizer = helpers.build_optimizer("bias_params", ...)
    with pytest.raises(ValueError, match=r"'nope'.*tags present: 'bias_params', None"):
        linear(optimizer, param_group_tags="nope")
    with pytest.raises(ValueError, match="select no param group"):
        linear(helpers.build_optimizer("a"), param_group_tags=[None])


def test_duplicate_tags_are_an_error(helpers):
    with pytest.raises(ValueError, match="'a' more than once"):
        linear(helpers.build_optimizer("a"), param_group_tags=["a", "a"])


def test_child_tags_differing_from_the_wrapper_are_an_error(helpers):
    optimizer = helpers.build_optimizer("a", "b")
    with pytest.raises(ValueError, match="give param_group_tags on SequentialLR only"):
        plugtrain.resolve("scheduler", "SequentialLR")(
            optimizer,
            schedulers=[{"ConstantLR": {"learning_rate": 0.1, "param_group_tags": "a"}}],
            param_group_tags="b",
        )
    child = linear(optimizer, param_group_tags="a")
    with pytest.raises(ValueError, match="give param_group_tags on ChainedLR only"):
        plugtrain.resolve("scheduler", "ChainedLR")([child])
    same = plugtrain.resolve("scheduler", "ChainedLR")([child], param_group_tags=["a"])
    assert same.group_indices == [0]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        (
            "CosineDecayLR",
            {"initial_learning_rate": 1.0, "end_learning_rate": 0.1, "total_iters": 50},
        ),
        ("OneCycleWD", {"initial_val": 0.01, "max_val": 0.1, "total_steps": 60}),
        (
            "SequentialLR",
            {
                "schedulers": [
                    {
                        "LinearLR": {
                            "initial_learning_rate": 0.0,
                            "end_learning_rate": 1.0,
                            "total_iters": 9,
                        }
                    },
                    {
                        "CosineAnnealingWarmRestarts": {
                            "initial_learning_rate": 1.0,
                            "T_0": 4,
                            "T_mult": 2,
                        }
                    },
                ]
            },
        ),
    ],
)
def test_state_round_trip_mid_schedule(helpers, name, arguments):
    cls = plugtrain.resolve("scheduler", name)
    optimizer = helpers.build_optimizer("x", ...)
    original = cls(optimizer, **arguments)
    for _ in range(23):
        original.step()
    state = pickle.loads(pickle.dumps(original.state_dict()))
    key = original.param_key
    uninterrupted = []
    for _ in range(30):
        original.step()
        uninterrupted.append([g[key] for g in optimizer.param_groups])

    resumed_optimizer = helpers.build_optimizer("x", ...)
    resumed = cls(resumed_optimizer, **arguments)
    resumed.load_state_dict(copy.deepcopy(state))
    # Loading writes the restored values at once (SPEC 9.9).
    assert [g[key] for g in resumed_optimizer.param_groups] == [original.value(23)] * 2
    assert resumed.state_dict() == state
    continued = []
    for _ in range(30):
        resumed.step()
        continued.append([g[key] for g in resumed_optimizer.param_groups])
    assert continued == uninterrupted


def test_state_of_other_groups_is_refused(helpers):
    state = linear(helpers.build_optimizer("a", "b"), param_group_tags="b").state_dict()
    with pytest.raises(ValueError, match="targets param groups"):
        linear(helpers.build_optimizer("a", "b"), param_group_tags="a").load_state_dict(state)


def test_state_survives_optimizer_load_state_dict(helpers):
    """torch replaces the group dicts on load; schedulers look groups up by index each step."""
    optimizer = helpers.build_optimizer()
    scheduler = linear(optimizer)
    optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.9)


def test_schedulers_expose_kind_and_groups_for_the_trainer(helpers):
    optimizer = helpers.build_optimizer("a", "b")
    wd = plugtrain.resolve("scheduler", "ConstantWD")(optimizer, val=0.1, param_group_tags="b")
    assert (wd.param_key, wd.group_indices) == ("weight_decay", [1])
    assert isinstance(wd.optimizer, torch.optim.Optimizer)
    assert wd.last_epoch == wd.last_step == 0
