"""The step tuner: plans chosen by measured step times, the same numbers under each.

The tuner's choices are checked with a clock the test drives (each plan "takes" the seconds the
test says), never with real timings.
"""

from __future__ import annotations

import itertools
import threading

import pytest
import torch

import plugtrain
from plugtrain_optimizers._threads import (
    EXPLORE_FIRST,
    TORCH_PATH_FROM,
    TUNE_VARIABLE,
    Plan,
    StepTuner,
    _setters,
)

ALL_BLOCKED, ONE = Plan(2), Plan(1)


@pytest.fixture
def tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Optimizers made in the test get the tuner (the default, unless the caller turned it off)."""
    monkeypatch.delenv(TUNE_VARIABLE, raising=False)


@pytest.fixture
def two_threads():
    """Two intra-op threads, where the tuner can set the stepping thread's count."""
    if not _setters():
        pytest.skip("torch's threads are not GNU OpenMP's: no tuner")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


class FakeLoad:
    """A clock under which a step with each plan takes ``cost[plan]`` seconds."""

    def __init__(self, cost: dict[Plan, float]) -> None:
        self.cost = cost
        self.now = 0.0
        self.plans: list[Plan] = []

    def clock(self) -> float:
        return self.now

    def steps(self, tuner: StepTuner, n: int) -> list[Plan]:
        """Take ``n`` steps; the plans they ran with."""
        ran = []
        for _ in range(n):
            with tuner.step():
                plan = Plan(torch.get_num_threads())
                self.now += self.cost[plan]
            ran.append(plan)
        return ran


def test_each_plan_is_tried_then_the_fastest_runs(two_threads):
    load = FakeLoad({ALL_BLOCKED: 1.0, ONE: 2.0})
    tuner = StepTuner(clock=load.clock)
    ran = load.steps(tuner, 10)
    # first step untimed (allocations), then each plan, the usual best twice, then the fastest
    assert ran[:4] == [ALL_BLOCKED, ALL_BLOCKED, ONE, ALL_BLOCKED]
    assert ran[4:] == [ALL_BLOCKED] * 6
    assert tuner.chosen == ALL_BLOCKED
    assert torch.get_num_threads() == 2


def test_the_other_plan_is_tried_again_less_and_less_often(two_threads):
    load = FakeLoad({ALL_BLOCKED: 1.0, ONE: 2.0})
    tuner = StepTuner(clock=load.clock)
    ran = load.steps(tuner, 8 + 8 * EXPLORE_FIRST)
    tries = [i for i, plan in enumerate(ran) if i >= 4 and plan != ALL_BLOCKED]
    gaps = [b - a for a, b in itertools.pairwise([3, *tries])]
    # EXPLORE_FIRST steps after the first choice, then doubling while the choice holds
    assert gaps == [EXPLORE_FIRST, 2 * EXPLORE_FIRST, 4 * EXPLORE_FIRST]


def test_a_load_that_slows_the_chosen_plan_moves_the_steps_to_one_thread(two_threads):
    load = FakeLoad({ALL_BLOCKED: 1.0, ONE: 2.0})
    tuner = StepTuner(clock=load.clock)
    load.steps(tuner, 20)
    assert tuner.chosen == ALL_BLOCKED
    # another process takes a core: parallel regions wait for the descheduled thread
    load.cost = {ALL_BLOCKED: 10.0, ONE: 2.5}
    ran = load.steps(tuner, 8)
    assert ran[-3:] == [ONE] * 3
    assert ran.count(ALL_BLOCKED) <= 3  # a few slow steps until its recent times show it
    # the load goes away: found at the next try, and the steps go back to both threads
    load.cost = {ALL_BLOCKED: 1.0, ONE: 2.0}
    ran = load.steps(tuner, EXPLORE_FIRST + 4)
    assert ran[-3:] == [ALL_BLOCKED] * 3


def test_a_passing_stall_does_not_move_the_steps(two_threads):
    load = FakeLoad({ALL_BLOCKED: 1.0, ONE: 2.0})
    tuner = StepTuner(clock=load.clock)
    load.steps(tuner, 20)
    load.cost = {ALL_BLOCKED: 10.0, ONE: 2.5}  # two slow steps: another tenant's burst
    load.steps(tuner, 2)
    load.cost = {ALL_BLOCKED: 1.0, ONE: 2.0}  # and it is over
    ran = load.steps(tuner, 6)
    assert ran[:2] == [ONE, ALL_BLOCKED]  # both timed again at once, the chosen one last
    assert ran[2:] == [ALL_BLOCKED] * 4
    assert tuner.chosen == ALL_BLOCKED


def test_one_thread_has_a_single_plan(two_threads):
    assert StepTuner().plans(1) == [ONE]
    assert StepTuner().plans(2) == [ALL_BLOCKED, ONE]


def test_a_step_that_raises_restores_threads(two_threads):
    tuner = StepTuner()
    tuner.choose = lambda threads: (ONE, True)  # type: ignore[method-assign]

    inside = []

    def fail() -> None:
        with tuner.step():
            inside.append(torch.get_num_threads())
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail()
    assert inside == [1]
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("name", ["Lamb", "Lion", "Rprop", "Adadelta", "Adafactor", "Adagrad"])
def test_every_plan_gives_the_same_numbers(train, two_threads, tuned, monkeypatch, name):
    kwargs = {"lr": 0.05} if name == "Adafactor" else {}
    results = {}
    for plan in (ALL_BLOCKED, ONE):
        monkeypatch.setattr(StepTuner, "choose", lambda self, threads, plan=plan: (plan, True))
        results[plan], _ = train(name, kwargs)
    for key, value in results[ONE].items():
        want = results[ALL_BLOCKED][key]
        if name in ("Lamb", "Adafactor"):  # float64: the order of the norms' sums differs
            torch.testing.assert_close(value, want, rtol=1e-12, atol=1e-14, msg=key)
        else:  # elementwise: the same bits
            assert torch.equal(value, want), f"{name} {key}"


def test_a_step_sets_the_stepping_threads_count_only(two_threads, monkeypatch):
    """Torch's own setting, which other threads see, is never changed: not even by a step."""
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    for name in ("Lion", "AdamW", "Lamb"):
        param = torch.nn.Parameter(torch.randn(300, 129))
        optimizer = plugtrain.resolve("optimizer", name)([param], lr=0.01)
        assert optimizer._tuner is not None
        for _ in range(6):  # the one-thread plan is tried at the third step
            param.grad = torch.randn(300, 129)
            optimizer.step()
    assert calls == []
    tuner = StepTuner()
    tuner.choose = lambda threads: (ONE, True)  # type: ignore[method-assign]
    seen: list[int] = []
    with tuner.step():
        seen.append(torch.get_num_threads())
        other = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        other.start()
        other.join()
    assert seen == [1, 2]  # this thread steps on one; another still sees two
    assert torch.get_num_threads() == 2


def test_the_tuner_can_be_turned_off(two_threads, monkeypatch):
    monkeypatch.setenv(TUNE_VARIABLE, "0")
    optimizer = plugtrain.resolve("optimizer", "Lion")([torch.nn.Parameter(torch.ones(3))])
    assert optimizer._tuner is None


def test_muon_keeps_every_thread(two_threads, tuned, monkeypatch):
    seen = []
    monkeypatch.setattr(StepTuner, "step", seen.append)
    param = torch.nn.Parameter(torch.randn(8, 8))
    param.grad = torch.randn(8, 8)
    plugtrain.resolve("optimizer", "Muon")([param], ns_dtype="float32").step()
    assert not seen


@pytest.fixture
def kernels(monkeypatch: pytest.MonkeyPatch):
    """The C kernels, loaded (skipped on a machine without a C compiler)."""
    from plugtrain_optimizers import _native

    monkeypatch.delenv(_native.SWITCH_VARIABLE, raising=False)
    try:
        _native._compiler()
    except RuntimeError as exc:
        pytest.skip(f"the kernels cannot be built here: {exc}")
    _native.reset()
    loaded = _native.load()
    assert loaded is not None, _native.status()
    yield loaded
    _native.reset()


def _lion(dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Parameter, torch.optim.Optimizer]:
    gen = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(300, 129, generator=gen, dtype=dtype))
    return param, plugtrain.resolve("optimizer", "Lion")([param], lr=1e-3)


def _grad(param: torch.nn.Parameter, step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    param.grad = torch.randn(param.shape, generator=gen, dtype=param.dtype)


def test_the_torch_path_is_a_plan_where_a_step_runs_kernels(two_threads, tuned, kernels):
    """From step TORCH_PATH_FROM on: the first choice is among the kernels' plans."""
    param, optimizer = _lion()
    param64, optimizer64 = _lion(torch.float64)  # no kernel for float64: nothing to compare
    for step in range(TORCH_PATH_FROM):
        assert optimizer._tuner.plans(2) == [ALL_BLOCKED, ONE]
        for p, opt in ((param, optimizer), (param64, optimizer64)):
            _grad(p, step)
            opt.step()
    assert optimizer._tuner.plans(2) == [Plan(2), Plan(1), Plan(2, False), Plan(1, False)]
    assert optimizer._tuner.plans(1) == [Plan(1), Plan(1, False)]
    assert optimizer64._tuner.plans(2) == [ALL_BLOCKED, ONE]


def test_slow_kernels_lose_to_the_torch_path(two_threads, tuned, kernels, monkeypatch):
    """Each kernel call "takes" 5 s of the test's clock, a step 1 s besides: the tuner moves the
    steps to the torch path, which then gives its own numbers (Lion's: the same bits)."""
    from plugtrain_optimizers import _native

    clock = FakeLoad({})
    fast = kernels.functions["lion_step"]

    def slow(*arguments: object) -> None:
        clock.now += 5.0
        fast(*arguments)

    monkeypatch.setitem(kernels.functions, "lion_step", slow)
    param, optimizer = _lion()
    optimizer._tuner = StepTuner(clock=lambda: clock.now)
    ran_kernels = []
    for step in range(TORCH_PATH_FROM + 12):
        _grad(param, step)
        calls = _native.calls()
        clock.now += 1.0
        optimizer.step()
        ran_kernels.append(_native.calls() != calls)
    assert optimizer._tuner.chosen == Plan(2, kernels=False)
    assert ran_kernels[-4:] == [False] * 4  # no kernel call in the last steps
    monkeypatch.setenv(_native.SWITCH_VARIABLE, "0")
    _native.reset()
    reference, without = _lion()
    without._tuner = None
    for step in range(TORCH_PATH_FROM + 12):
        _grad(reference, step)
        without.step()
    assert torch.equal(param.detach(), reference.detach())


def test_kernels_that_are_fast_keep_running(two_threads, tuned, kernels, monkeypatch):
    """The torch path "takes" 5 s a step, a kernel step 1 s: the kernels stay chosen."""
    from plugtrain_optimizers import _native

    clock = FakeLoad({})
    param, optimizer = _lion()
    optimizer._tuner = StepTuner(clock=lambda: clock.now)
    torch_path = _native.torch_path

    def slow_torch_path():
        clock.now += 5.0
        return torch_path()

    monkeypatch.setattr(_native, "torch_path", slow_torch_path)
    for step in range(TORCH_PATH_FROM + 12):
        _grad(param, step)
        clock.now += 1.0
        optimizer.step()
    assert optimizer._tuner.chosen == Plan(2)


def test_the_torch_path_is_a_plan_only_where_it_gives_the_kernels_bits(two_threads, tuned, kernels):
    """A step whose plan is chosen by timing must give the same numbers whichever wins: NAdam's
    kernel and torch path differ in the last bits, so its steps never leave the kernels."""
    gen = torch.Generator().manual_seed(0)
    param = torch.nn.Parameter(torch.randn(300, 129, generator=gen))
    optimizer = plugtrain.resolve("optimizer", "NAdam")([param], lr=1e-3)
    for step in range(TORCH_PATH_FROM + 2):
        _grad(param, step)
        optimizer.step()
    assert optimizer._tuner.kernels_ran
    assert optimizer._tuner.plans(2) == [ALL_BLOCKED, ONE]
    for name in ("Lion", "ASGD", "Rprop", "Adamax", "SGDScheduleFree"):
        assert plugtrain.resolve("optimizer", name).kernels_match_torch_path, name
    for name in ("Adadelta", "NAdam", "AdamWScheduleFree", "Lamb", "Adafactor"):
        assert not plugtrain.resolve("optimizer", name).kernels_match_torch_path, name
