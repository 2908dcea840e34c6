"""Tests of acme-plugtrain-warmup; they run once the distribution is installed, else skip.

From the plugtrain repository: ``pytest examples/acme-plugtrain-warmup/tests`` (after
``pip install examples/acme-plugtrain-warmup``); ``tests/integration/test_third_party_scheduler.py``
installs it into a temporary directory and runs this file there.
"""

from __future__ import annotations

import io

import pytest

pytest.importorskip("acme_plugtrain_warmup", reason="acme-plugtrain-warmup is not installed")
torch = pytest.importorskip("torch")

# imported after the skips, so that a missing plugin skips cleanly
import acme_plugtrain_warmup.plugin  # noqa: E402
from acme_plugtrain_warmup.halving import HalvingLR  # noqa: E402
from acme_plugtrain_warmup.warmup import LinearWarmupLR  # noqa: E402

import plugtrain  # noqa: E402
from plugtrain.authoring.schedule_plot import schedule_curves  # noqa: E402
from plugtrain.testing import (  # noqa: E402
    assert_plugin_contract,
    assert_plugin_installed,
    check_plugin_contract,
    check_scheduler,
    isolated_registry,
)

DISTRIBUTION = "acme-plugtrain-warmup"
ARGUMENTS = {
    "LinearWarmupLR": {"peak_learning_rate": 0.1, "warmup_steps": 4, "param_group_tags": "a"},
    "HalvingLR": {"every": 3},
}


def warmup(e: int, peak: float = 0.1, steps: int = 4, start: float = 0.0) -> float:
    """The warmup written out independently of the plugin's closed form."""
    return peak * (start + (1.0 - start) * min(e, steps) / steps)


def halving(k: int, base: float, every: int = 3, factor: float = 0.5) -> float:
    """HalvingLR's value after ``k`` steps from ``base`` (repeated multiplication, as torch)."""
    value = base
    for step in range(1, k + 1):
        if step % every == 0:
            value *= factor
    return value


def optimizer_with(*tags: object, lr: float = 1.0) -> torch.optim.SGD:
    """SGD with one group per entry of ``tags`` (``...``: a group without tags)."""
    groups = []
    for tag in tags:
        group: dict = {"params": [torch.zeros(2, requires_grad=True)]}
        if tag is not ...:
            group["tags"] = tag
        groups.append(group)
    return torch.optim.SGD(groups, lr=lr)


def values_of(optimizer: torch.optim.Optimizer, schedulers: list, steps: int) -> list[list[float]]:
    """Every group's lr at steps 0 .. steps - 1, stepping as a training loop does."""
    found = []
    for step in range(steps):
        if step:
            optimizer.step()
            for scheduler in schedulers:
                scheduler.step()
        found.append([group["lr"] for group in optimizer.param_groups])
    return found


# -- as a plugin ----------------------------------------------------------------------------


def test_conformance_kit_linear_warmup() -> None:
    # step 0, resume, tag targeting, closed form equals stepping, nesting in SequentialLR
    report = check_scheduler(LinearWarmupLR, {"peak_learning_rate": 0.1, "warmup_steps": 4})
    assert report.outcome("closed_form_matches_stepping") == "passed"


def test_conformance_kit_halving() -> None:
    # a plain torch LRScheduler: no closed form and no param_group_tags, so those do not apply
    report = check_scheduler(HalvingLR, {"every": 3})
    assert report.outcome("closed_form_matches_stepping") == "not applicable"
    assert report.outcome("nests_in_sequential") == "passed"


def test_plugin_is_installed(installed_registry: plugtrain.Registry) -> None:
    assert_plugin_installed(DISTRIBUTION, installed_registry)


def test_plugin_contract_with_a_checkpoint_round_trip(
    installed_registry: plugtrain.Registry,
) -> None:
    """Signatures match the schemas, plugin.py and schemas.py are torch-free, and both states
    go through torch.load(weights_only=True) and continue exactly."""
    assert_plugin_contract(DISTRIBUTION, installed_registry, arguments=ARGUMENTS)


def test_the_contract_holds_when_another_plugin_registers_the_same_name() -> None:
    """The check resolves 'acme-plugtrain-warmup:LinearWarmupLR', not the bare (ambiguous) name."""

    class Impostor:
        @plugtrain.hookimpl
        def plugtrain_register_schedulers(self, registry) -> None:
            registry.register(
                "LinearWarmupLR",
                "plugtrain.scheduler:Scheduler",
                schema=acme_plugtrain_warmup.schemas.LinearWarmupLRArgs,
            )

    registry = isolated_registry(acme_plugtrain_warmup.plugin, Impostor())
    with pytest.raises(plugtrain.DuplicateNameError):
        registry.lookup("scheduler", "LinearWarmupLR")
    name = acme_plugtrain_warmup.plugin.__name__
    assert check_plugin_contract(name, registry, arguments=ARGUMENTS) == []


# -- the closed form ------------------------------------------------------------------------


def test_linear_warmup_follows_its_formula_on_its_tag_only() -> None:
    optimizer = optimizer_with(..., "a")
    scheduler = LinearWarmupLR(
        optimizer, peak_learning_rate=0.2, warmup_steps=5, start_factor=0.1, param_group_tags="a"
    )
    assert scheduler.group_indices == [1]
    assert scheduler.length == 5
    found = values_of(optimizer, [scheduler], 8)
    assert [row[1] for row in found] == pytest.approx(
        [warmup(e, 0.2, 5, 0.1) for e in range(8)], rel=1e-15
    )
    assert [row[0] for row in found] == [1.0] * 8


def test_bad_arguments_fail_like_in_a_run_file() -> None:
    with pytest.raises(plugtrain.ConfigError, match=r"LinearWarmupLR\.warmup_steps"):
        LinearWarmupLR(optimizer_with(...), peak_learning_rate=0.1, warmup_steps=0)


# -- nested in the built-in wrappers --------------------------------------------------------


def test_nests_in_sequential_lr_which_takes_its_length_as_milestone() -> None:
    optimizer = optimizer_with(...)
    sequential = plugtrain.resolve("scheduler", "SequentialLR")(
        optimizer,
        schedulers=[
            LinearWarmupLR(optimizer, peak_learning_rate=0.1, warmup_steps=4),
            plugtrain.resolve("scheduler", "CosineDecayLR")(
                optimizer, initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=6
            ),
        ],
    )
    assert sequential.length == 10
    found = [row[0] for row in values_of(optimizer, [sequential], 12)]
    assert found[:5] == pytest.approx([warmup(e) for e in range(5)], rel=1e-15)
    assert found[4] == pytest.approx(0.1)
    assert found[10:] == [0.0, 0.0]


def test_nests_in_chained_lr_from_a_mapping() -> None:
    optimizer = optimizer_with(...)
    chained = plugtrain.resolve("scheduler", "ChainedLR")(
        optimizer,
        schedulers=[
            {"LinearWarmupLR": {"peak_learning_rate": 0.1, "warmup_steps": 4}},
            {"StepLR": {"initial_learning_rate": 2.0, "step_size": 2, "gamma": 0.5}},
        ],
    )
    found = [row[0] for row in values_of(optimizer, [chained], 8)]
    assert found == pytest.approx([warmup(e) * 0.5 ** (e // 2) for e in range(8)], rel=1e-15)


def test_a_torch_lr_scheduler_in_chained_lr_sees_only_its_own_values() -> None:
    """HalvingLR reads the group's lr; in a chain that lr is the product, not its own value."""
    optimizer = optimizer_with(..., lr=0.1)
    chained = plugtrain.resolve("scheduler", "ChainedLR")(
        optimizer,
        schedulers=[
            {"LinearWarmupLR": {"peak_learning_rate": 0.1, "warmup_steps": 4}},
            {"HalvingLR": {"every": 2}},
        ],
    )
    found = [row[0] for row in values_of(optimizer, [chained], 9)]
    expected = [warmup(e) * halving(e, 0.1, every=2) / 0.1 for e in range(9)]
    assert found == pytest.approx(expected, rel=1e-15)


def test_a_torch_lr_scheduler_nests_in_sequential_lr_on_one_tag() -> None:
    """HalvingLR writes every group; nested, it moves only the wrapper's groups."""
    optimizer = optimizer_with(..., "bias", lr=0.1)
    constant = plugtrain.resolve("scheduler", "ConstantLR")(
        optimizer, learning_rate=0.05, param_group_tags="bias"
    )
    sequential = plugtrain.resolve("scheduler", "SequentialLR")(
        optimizer,
        schedulers=[
            {"LinearWarmupLR": {"peak_learning_rate": 0.1, "warmup_steps": 4}},
            {"HalvingLR": {"every": 3}},
        ],
        param_group_tags=[None],
    )
    assert sequential.curve is None  # HalvingLR has no closed form: the wrapper steps it
    found = values_of(optimizer, [constant, sequential], 14)
    expected = [warmup(e) if e < 4 else halving(e - 4, 0.1) for e in range(14)]
    assert [row[0] for row in found] == pytest.approx(expected, rel=1e-15)
    assert [row[1] for row in found] == [0.05] * 14


def test_a_nested_torch_scheduler_resumes_exactly() -> None:
    def build(optimizer: torch.optim.Optimizer) -> object:
        return plugtrain.resolve("scheduler", "SequentialLR")(
            optimizer,
            schedulers=[
                LinearWarmupLR(optimizer, peak_learning_rate=0.1, warmup_steps=2),
                HalvingLR(optimizer, every=2),
            ],
        )

    straight_optimizer = optimizer_with(...)
    straight = build(straight_optimizer)
    expected = values_of(straight_optimizer, [straight], 12)

    first_optimizer = optimizer_with(...)
    first = build(first_optimizer)
    values_of(first_optimizer, [first], 7)  # steps 0 .. 6
    # through a real file, loaded as plugtrain loads checkpoints
    saved = {"optimizer": first_optimizer.state_dict(), "scheduler": first.state_dict()}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    second_optimizer = optimizer_with(...)
    second = build(second_optimizer)
    second_optimizer.load_state_dict(loaded["optimizer"])
    second.load_state_dict(loaded["scheduler"])
    resumed = [row[0] for row in values_of(second_optimizer, [second], 6)]
    assert resumed == [row[0] for row in expected[6:12]]


# -- plot -----------------------------------------------------------------------------------


def test_plot_draws_the_closed_form_and_steps_the_torch_scheduler() -> None:
    specs = [
        {
            "SequentialLR": {
                "schedulers": [
                    {"LinearWarmupLR": {"peak_learning_rate": 0.1, "warmup_steps": 4}},
                    {"HalvingLR": {"every": 3}},
                ],
                "param_group_tags": [None],
            }
        },
        {"LinearWarmupLR": {"peak_learning_rate": 0.5, "warmup_steps": 4, "param_group_tags": "b"}},
    ]
    optimizer = {"SGD": {"lr": 0.1}}
    stepped, closed = schedule_curves(specs, 10, optimizer=optimizer)
    assert stepped.stepped
    assert "stepped" in stepped.label
    assert stepped.values == pytest.approx(
        [warmup(e) if e < 4 else halving(e - 4, 0.1) for e in range(10)], rel=1e-15
    )
    assert not closed.stepped
    assert closed.label == "LinearWarmupLR [b]"
    assert closed.values == pytest.approx([warmup(e, 0.5) for e in range(10)], rel=1e-15)
