"""Where plugtrain's definitions coincide with torch.optim.lr_scheduler, the values agree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.optim import lr_scheduler as torch_sched

import plugtrain


def torch_values(make: Callable[[torch.optim.Optimizer], Any], steps: int, lr: float) -> list:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr)
    scheduler = make(optimizer)
    values = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps - 1):
        optimizer.step()  # torch warns when a scheduler steps before its optimizer
        scheduler.step()
        values.append(optimizer.param_groups[0]["lr"])
    return values


def our_values(name: str, steps: int, **arguments: Any) -> list:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=123.0)
    scheduler = plugtrain.resolve("scheduler", name)(optimizer, **arguments)
    values = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps - 1):
        scheduler.step()
        values.append(optimizer.param_groups[0]["lr"])
    return values


# torch's recursive forms accumulate rounding; 1e-9 relative is far below any visible change.
TOLERANCE = {"rel": 1e-9, "abs": 1e-15}


@pytest.mark.parametrize("eta_min", [0.0, 0.05])
def test_cosine_annealing_matches_torch_over_several_periods(eta_min):
    ours = our_values("CosineAnnealingLR", 95, initial_learning_rate=0.8, T_max=20, eta_min=eta_min)
    theirs = torch_values(lambda o: torch_sched.CosineAnnealingLR(o, 20, eta_min), 95, 0.8)
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def test_step_lr_matches_torch():
    ours = our_values("StepLR", 60, initial_learning_rate=0.8, step_size=7, gamma=0.3)
    theirs = torch_values(lambda o: torch_sched.StepLR(o, 7, 0.3), 60, 0.8)
    assert ours == pytest.approx(theirs, **TOLERANCE)


@pytest.mark.parametrize("milestones", [[3, 17, 40], [40, 3, 17], [17, 3, 17, 40, 17]])
def test_multi_step_lr_matches_torch(milestones):
    """torch counts milestones with repetition, in any order (a collections.Counter)."""
    ours = our_values(
        "MultiStepLR", 60, initial_learning_rate=0.8, gamma=0.5, milestones=milestones
    )
    theirs = torch_values(lambda o: torch_sched.MultiStepLR(o, milestones, 0.5), 60, 0.8)
    assert ours == pytest.approx(theirs, **TOLERANCE)


def test_exponential_forms_match_torch():
    """torch's ExponentialLR(gamma) is ours with total_iters=1; StepLR is ours with staircase."""
    ours = our_values(
        "ExponentialLR", 50, initial_learning_rate=0.8, total_iters=1, decay_rate=0.93
    )
    theirs = torch_values(lambda o: torch_sched.ExponentialLR(o, 0.93), 50, 0.8)
    assert ours == pytest.approx(theirs, **TOLERANCE)
    ours = our_values(
        "ExponentialLR",
        50,
        initial_learning_rate=0.8,
        total_iters=6,
        decay_rate=0.5,
        staircase=True,
    )
    theirs = torch_values(lambda o: torch_sched.StepLR(o, 6, 0.5), 50, 0.8)
    assert ours == pytest.approx(theirs, **TOLERANCE)


@pytest.mark.parametrize(
    ("mode", "down"),
    [("triangular", None), ("triangular", 7), ("triangular2", 3), ("exp_range", 5)],
)
def test_cyclic_matches_torch_with_its_default_scale_mode(mode, down):
    ours = our_values(
        "CyclicLR",
        80,
        base_lr=0.1,
        max_lr=0.9,
        step_size_up=4,
        step_size_down=down,
        mode=mode,
        gamma=0.97,
    )
    theirs = torch_values(
        lambda o: torch_sched.CyclicLR(
            o, 0.1, 0.9, 4, down, mode=mode, gamma=0.97, cycle_momentum=False
        ),
        80,
        0.1,
    )
    assert ours == pytest.approx(theirs, **TOLERANCE)


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_cosine_annealing_warm_restarts_matches_torch(t_mult):
    ours = our_values(
        "CosineAnnealingWarmRestarts",
        200,
        initial_learning_rate=0.8,
        T_0=5,
        T_mult=t_mult,
        eta_min=0.01,
    )
    theirs = torch_values(
        lambda o: torch_sched.CosineAnnealingWarmRestarts(o, 5, t_mult, eta_min=0.01), 200, 0.8
    )
    assert ours == pytest.approx(theirs, **TOLERANCE)


@pytest.mark.parametrize("three_phase", [False, True])
@pytest.mark.parametrize("anneal", ["cos", "linear"])
def test_one_cycle_matches_torch_with_its_argument_mapping(three_phase, anneal):
    """torch's max_lr, div_factor and final_div_factor are our max, max / initial and F."""
    initial, peak, final_div, total = 0.04, 1.0, 100.0, 97
    ours = our_values(
        "OneCycleLR",
        total,
        initial_learning_rate=initial,
        max_lr=peak,
        total_steps=total,
        pct_start=0.25,
        final_div_factor=final_div,
        three_phase=three_phase,
        anneal_strategy=anneal,
    )
    theirs = torch_values(
        lambda o: torch_sched.OneCycleLR(
            o,
            max_lr=peak,
            total_steps=total,
            pct_start=0.25,
            anneal_strategy=anneal,
            cycle_momentum=False,
            div_factor=peak / initial,
            final_div_factor=final_div,
            three_phase=three_phase,
        ),
        total,
        initial,
    )
    assert ours == pytest.approx(theirs, **TOLERANCE)


def test_polynomial_matches_torch_relative_form():
    """torch's PolynomialLR decays the optimizer's lr to 0: ours with end_learning_rate 0."""
    ours = our_values(
        "PolynomialLR",
        30,
        initial_learning_rate=0.8,
        end_learning_rate=0.0,
        total_iters=20,
        power=2.0,
    )
    theirs = torch_values(lambda o: torch_sched.PolynomialLR(o, 20, 2.0), 30, 0.8)
    assert ours == pytest.approx(theirs, **TOLERANCE)


def test_works_on_torch_optimizers_of_every_family():
    params = [torch.nn.Parameter(torch.zeros(2))]
    for optimizer in (
        torch.optim.Adam(params, lr=0.1, weight_decay=0.1),
        torch.optim.AdamW(params, lr=0.1),
        torch.optim.RMSprop(params, lr=0.1),
        torch.optim.Adagrad(params, lr=0.1),
    ):
        lr = plugtrain.resolve("scheduler", "CosineDecayLR")(
            optimizer, initial_learning_rate=0.2, end_learning_rate=0.0, total_iters=4
        )
        wd = plugtrain.resolve("scheduler", "LinearWD")(
            optimizer, initial_val=0.01, end_val=0.0, total_iters=4
        )
        for _ in range(4):
            lr.step()
            wd.step()
        assert optimizer.param_groups[0]["lr"] == 0.0
        assert optimizer.param_groups[0]["weight_decay"] == 0.0
