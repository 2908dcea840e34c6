"""Issue 13: OneCycle's ``max_lr``, CyclicLR's default ``scale_mode``, ScalePerParam's factors and
MultiStep's unsorted, repeated milestones, against the values cstorch 2.10 computes.

The expected numbers are cstorch's: its own ``cerebras/pytorch/optim/scheduler.py`` (with
``lr_scheduler.py`` and ``weight_decay_scheduler.py``) run on CPU with only the Cerebras backend
stubbed out, each value read from the float32 tensor cstorch writes into the group and written
out here. plugtrain computes in float64, so a value agrees when it is within cstorch's float32
rounding: a few units of 2**-24 relative to the largest operand of its formula (the schedule's
peak), bounded here by 2**-20 of the peak; any wrong argument or formula is far outside that.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import plugtrain
from plugtrain.errors import ConfigError
from plugtrain.schema import ArgInfo, arg_infos, check_arguments

FLOAT32 = 2.0**-20


def cstorch_close(found: list[float], expected: list[float]) -> bool:
    """Whether ``found`` equals cstorch's float32 ``expected`` to float32 rounding."""
    scale = max(abs(v) for v in expected)
    return found == pytest.approx(expected, rel=FLOAT32, abs=FLOAT32 * scale)


def trajectory(scheduler: Any, steps: int, group: int = 0) -> list[float]:
    """The value in param group ``group`` at e = 0 .. steps - 1."""
    values = []
    for e in range(steps):
        if e:
            scheduler.step()
        values.append(scheduler.optimizer.param_groups[group][scheduler.param_key])
    return values


def schema_of(name: str) -> type:
    return plugtrain.get_registry().lookup("scheduler", name).schema_class


def described(name: str, argument: str) -> ArgInfo:
    """What ``plugtrain show NAME`` says of ``argument``."""
    (info,) = [a for a in arg_infos(schema_of(name)) if a.name == argument]
    return info


# -- 1. OneCycleLR takes cstorch's max_lr ------------------------------------------------------

# cstorch OneCycleLR(initial_learning_rate=0.1, max_lr=1.0, total_steps=10): rise to step 2,
# cosine down to 0.1 / 1e4 at step 9.
ONE_CYCLE_LR = [
    0.10000002384185791,
    0.5500000715255737,
    1.0,
    0.9504848718643188,
    0.8117467761039734,
    0.6112642884254456,
    0.38874557614326477,
    0.18826311826705933,
    0.049525048583745956,
    9.999999747378752e-06,
]

# cstorch OneCycleWD(initial_val=0.01, max_val=0.1, total_steps=10, three_phase=True,
# anneal_strategy="linear"); the last value carries float32 cancellation (0.01 - 0.01 + 1e-6).
ONE_CYCLE_WD = [
    0.009999999776482582,
    0.054999999701976776,
    0.10000000149011612,
    0.054999999701976776,
    0.009999997913837433,
    0.008000199683010578,
    0.0060004000551998615,
    0.004000599961727858,
    0.002000800333917141,
    1.000240445137024e-06,
]


def test_one_cycle_lr_takes_max_lr_by_name_and_in_cstorch_position(helpers):
    one_cycle = plugtrain.resolve("scheduler", "OneCycleLR")
    by_name = one_cycle(
        helpers.build_optimizer(), initial_learning_rate=0.1, max_lr=1.0, total_steps=10
    )
    assert cstorch_close(trajectory(by_name, 10), ONE_CYCLE_LR)
    positional = one_cycle(helpers.build_optimizer(), 0.1, 1.0, 10)
    assert cstorch_close(trajectory(positional, 10), ONE_CYCLE_LR)
    arguments = {"initial_learning_rate": 0.1, "max_lr": 1.0}
    assert check_arguments(schema_of("OneCycleLR"), arguments) == []


def test_one_cycle_lr_keeps_max_learning_rate_as_an_alias(helpers):
    one_cycle = plugtrain.resolve("scheduler", "OneCycleLR")
    aliased = one_cycle(
        helpers.build_optimizer(), initial_learning_rate=0.1, max_learning_rate=1.0, total_steps=10
    )
    assert cstorch_close(trajectory(aliased, 10), ONE_CYCLE_LR)
    with pytest.raises(ConfigError, match="'max_learning_rate' and 'max_lr' name the same"):
        one_cycle(
            helpers.build_optimizer(),
            initial_learning_rate=0.1,
            max_lr=1.0,
            max_learning_rate=1.0,
        )
    assert described("OneCycleLR", "max_lr").aliases == ("max_learning_rate",)
    assert described("OneCycleWD", "max_weight_decay").aliases == ("max_val",)


@pytest.mark.parametrize("peak", ["max_weight_decay", "max_val"])
@pytest.mark.parametrize("initial", ["initial_weight_decay", "initial_val"])
def test_one_cycle_wd_takes_the_seed_names_and_cstorchs(helpers, initial, peak):
    scheduler = plugtrain.resolve("scheduler", "OneCycleWD")(
        helpers.build_optimizer(),
        **{initial: 0.01, peak: 0.1},
        total_steps=10,
        three_phase=True,
        anneal_strategy="linear",
    )
    assert cstorch_close(trajectory(scheduler, 10), ONE_CYCLE_WD)


# -- 2. CyclicLR's default scale_mode follows the mode, as in torch -----------------------------

# cstorch CyclicLR(base_lr=0.1, max_lr=1.0, step_size_up=4, mode="exp_range", gamma=0.9):
# the amplitude scales by 0.9 ** e (torch's 'iterations' for exp_range).
CYCLIC_EXP_RANGE_LR = [
    0.10000000149011612,
    0.3024999797344208,
    0.46449995040893555,
    0.5920749306678772,
    0.6904899477958679,
    0.498580664396286,
    0.3391484022140503,
    0.20761677622795105,
    0.10000000149011612,
    0.18716958165168762,
    0.2569052577018738,
    0.3118220865726471,
    0.3541865050792694,
    0.2715758681297302,
    0.2029455304145813,
    0.14632548391819,
    0.10000000149011612,
]

# cstorch CyclicWD(base_val=0.01, max_val=0.1, step_size_up=2, step_size_down=3,
# mode="exp_range", gamma=0.8).
CYCLIC_EXP_RANGE_WD = [
    0.009999999776482582,
    0.04599999636411667,
    0.06760000437498093,
    0.040720000863075256,
    0.022288000211119652,
    0.009999999776482582,
    0.021796483546495438,
    0.028874369338154793,
    0.020066330209374428,
    0.014026532880961895,
    0.009999999776482582,
]

# cstorch CyclicLR(base_lr=0.1, max_lr=1.0, step_size_up=2, mode="triangular2"): halved per cycle.
CYCLIC_TRIANGULAR2 = [
    0.10000000149011612,
    0.550000011920929,
    1.0,
    0.550000011920929,
    0.10000000149011612,
    0.32499998807907104,
    0.550000011920929,
    0.32499998807907104,
    0.10000000149011612,
    0.21250000596046448,
    0.32499998807907104,
    0.21250000596046448,
    0.10000000149011612,
]


def test_cyclic_exp_range_scales_by_gamma_to_the_step_by_default(helpers):
    lr = plugtrain.resolve("scheduler", "CyclicLR")(
        helpers.build_optimizer(),
        base_lr=0.1,
        max_lr=1.0,
        step_size_up=4,
        mode="exp_range",
        gamma=0.9,
    )
    assert cstorch_close(trajectory(lr, 17), CYCLIC_EXP_RANGE_LR)
    wd = plugtrain.resolve("scheduler", "CyclicWD")(
        helpers.build_optimizer(),
        base_val=0.01,
        max_val=0.1,
        step_size_up=2,
        step_size_down=3,
        mode="exp_range",
        gamma=0.8,
    )
    assert cstorch_close(trajectory(wd, 11), CYCLIC_EXP_RANGE_WD)


def test_cyclic_triangular_modes_scale_by_the_cycle_by_default(helpers):
    scheduler = plugtrain.resolve("scheduler", "CyclicLR")(
        helpers.build_optimizer(), base_lr=0.1, max_lr=1.0, step_size_up=2, mode="triangular2"
    )
    assert cstorch_close(trajectory(scheduler, 13), CYCLIC_TRIANGULAR2)
    assert described("CyclicLR", "scale_mode").default is None


def test_an_explicit_scale_mode_wins_over_the_modes_default(helpers):
    """cstorch ignores scale_mode (SPEC 9.6); here exp_range with 'cycle' scales by 0.9 ** cycle."""
    scheduler = plugtrain.resolve("scheduler", "CyclicLR")(
        helpers.build_optimizer(),
        base_lr=0.1,
        max_lr=1.0,
        step_size_up=4,
        mode="exp_range",
        gamma=0.9,
        scale_mode="cycle",
    )
    found = trajectory(scheduler, 13)
    # Step 2: half way up cycle 1 (0.1 + 0.9 * 0.5 * 0.9); 4: peak of cycle 1; 12: peak of cycle 2.
    assert [found[2], found[4], found[8], found[12]] == pytest.approx(
        [0.505, 0.91, 0.1, 0.829], rel=1e-12
    )
    ascending = plugtrain.resolve("scheduler", "CyclicLR")(
        helpers.build_optimizer(), base_lr=0.1, max_lr=1.0, step_size_up=2, scale_mode="iterations"
    )
    assert trajectory(ascending, 3) == pytest.approx([0.1, 0.55, 1.0], rel=1e-12)


# -- 3. ScalePerParam: adjust_learning_rate, else adjust_val, else 1 ---------------------------

# Groups: adjust_learning_rate 0.5; adjust_val 2.0; both (3.0 and 7.0); adjust_weight_decay 9.0
# only, which cstorch does not read. Rows: steps 0 .. 4; columns: groups.
FACTOR_GROUPS: list[dict[str, float]] = [
    {"adjust_learning_rate": 0.5},
    {"adjust_val": 2.0},
    {"adjust_learning_rate": 3.0, "adjust_val": 7.0},
    {"adjust_weight_decay": 9.0},
]

# cstorch ScalePerParamLR(scheduler=StepLR(initial_learning_rate=0.1, step_size=2, gamma=0.3)).
SCALED_LR = [
    [0.05000000074505806, 0.20000000298023224, 0.30000001192092896, 0.10000000149011612],
    [0.05000000074505806, 0.20000000298023224, 0.30000001192092896, 0.10000000149011612],
    [0.015000000596046448, 0.06000000238418579, 0.09000000357627869, 0.030000001192092896],
    [0.015000000596046448, 0.06000000238418579, 0.09000000357627869, 0.030000001192092896],
    [0.004500000271946192, 0.018000001087784767, 0.027000002562999725, 0.009000000543892384],
]

# cstorch ScalePerParamWD(scheduler=StepWD(initial_val=0.01, step_size=2, gamma=0.3)): the same
# group keys as the LR scheduler.
SCALED_WD = [
    [0.004999999888241291, 0.019999999552965164, 0.029999999329447746, 0.009999999776482582],
    [0.004999999888241291, 0.019999999552965164, 0.029999999329447746, 0.009999999776482582],
    [0.001500000013038516, 0.006000000052154064, 0.008999999612569809, 0.003000000026077032],
    [0.001500000013038516, 0.006000000052154064, 0.008999999612569809, 0.003000000026077032],
    [0.0004500000213738531, 0.0018000000854954123, 0.0027000000700354576, 0.0009000000427477062],
]


def factor_optimizer() -> torch.optim.SGD:
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], **f} for f in FACTOR_GROUPS]
    return torch.optim.SGD(groups, lr=0.5, weight_decay=0.25)


@pytest.mark.parametrize(
    ("name", "inner", "expected"),
    [
        (
            "ScalePerParamLR",
            {"StepLR": {"initial_learning_rate": 0.1, "step_size": 2, "gamma": 0.3}},
            SCALED_LR,
        ),
        (
            "ScalePerParamWD",
            {"StepWD": {"initial_val": 0.01, "step_size": 2, "gamma": 0.3}},
            SCALED_WD,
        ),
    ],
)
def test_scale_per_param_reads_adjust_learning_rate_else_adjust_val(name, inner, expected):
    scheduler = plugtrain.resolve("scheduler", name)(factor_optimizer(), scheduler=inner)
    for e, row in enumerate(expected):
        if e:
            scheduler.step()
        found = [g[scheduler.param_key] for g in scheduler.optimizer.param_groups]
        assert cstorch_close(found, row), e
        assert scheduler.get_last_value() == found


# -- 4. MultiStep: milestones in any order, repeats counted --------------------------------------

# cstorch MultiStepLR(initial_learning_rate=0.1, gamma=0.5, milestones=[8, 4, 4]), steps 0 .. 10.
MULTI_STEP_LR = [0.10000000149011612] * 4 + [0.02500000037252903] * 4 + [0.012500000186264515] * 3

# cstorch MultiStepWD(initial_val=0.01, gamma=0.1, milestones=[6, 2, 6, 6]), steps 0 .. 8.
MULTI_STEP_WD = (
    [0.009999999776482582] * 2 + [0.0010000000474974513] * 4 + [1.0000001111620804e-06] * 3
)


def test_multi_step_counts_unsorted_and_repeated_milestones(helpers):
    lr = plugtrain.resolve("scheduler", "MultiStepLR")(
        helpers.build_optimizer(), initial_learning_rate=0.1, gamma=0.5, milestones=[8, 4, 4]
    )
    assert cstorch_close(trajectory(lr, 11), MULTI_STEP_LR)
    wd = plugtrain.resolve("scheduler", "MultiStepWD")(
        helpers.build_optimizer(), initial_val=0.01, gamma=0.1, milestones=[6, 2, 6, 6]
    )
    assert cstorch_close(trajectory(wd, 9), MULTI_STEP_WD)
    schema = schema_of("MultiStepLR")
    given = {"initial_learning_rate": 0.1, "gamma": 0.5, "milestones": [8, 4, 4]}
    assert check_arguments(schema, given) == []
    assert check_arguments(schema, {**given, "milestones": [3, -1]}) == [
        ("milestones", "must be >= 0, got [3, -1]")
    ]
