"""The conformance kit fails each property on a component built to break it, and says why."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from plugtrain.scheduler import Scheduler
from plugtrain.testing import (
    OPTIMIZER_PROPERTIES,
    ConformanceError,
    check_backend,
    check_callback,
    check_dataloader,
    check_logger,
    check_model,
    check_optimizer,
    check_scheduler,
)


class PlainSGD(torch.optim.Optimizer):
    """SGD with momentum and a foreach path, written as a plugin author would (the reference)."""

    def __init__(self, params: Any, lr: float = 0.1, momentum: float = 0.5, foreach: bool = True):
        super().__init__(params, {"lr": lr, "momentum": momentum, "foreach": foreach})

    def lr_of(self, group: dict[str, Any]) -> float:
        return float(group["lr"])

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if self.has_grad(p)]
            grads = [p.grad for p in params]
            bufs = [self.buffer(p) for p in params]
            if not params:
                continue
            if group["foreach"]:
                torch._foreach_mul_(bufs, group["momentum"])
                torch._foreach_add_(bufs, grads)
                torch._foreach_add_(params, bufs, alpha=-self.lr_of(group))
            else:
                for p, g, b in zip(params, grads, bufs, strict=True):
                    b.mul_(group["momentum"]).add_(g)
                    p.add_(b, alpha=-self.lr_of(group))
        return loss

    def has_grad(self, p: torch.Tensor) -> bool:
        return p.grad is not None

    def buffer(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(p)
        return state["momentum_buffer"]


class ForgetsState(PlainSGD):
    """Keeps its momentum outside ``self.state``: a resumed run starts from zero momentum."""

    def buffer(self, p: torch.Tensor) -> torch.Tensor:
        store = self.__dict__.setdefault("_hidden", {})
        return store.setdefault(id(p), torch.zeros_like(p))


class IgnoresGroups(PlainSGD):
    def lr_of(self, group: dict[str, Any]) -> float:
        return float(self.defaults["lr"])


class TouchesFrozen(PlainSGD):
    def has_grad(self, p: torch.Tensor) -> bool:
        if p.grad is None:
            p.grad = torch.ones_like(p)
        return True


class LosesBfloat16(PlainSGD):
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype == torch.bfloat16:
                    p.data = p.data.float()
        return super().step(closure)


class DropsLoss(PlainSGD):
    def step(self, closure: Any = None) -> Any:
        super().step(closure)
        return None


class SlowForLoop(PlainSGD):
    """Its per-tensor path forgets the momentum."""

    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            if not group["foreach"]:
                for p in group["params"]:
                    self.buffer(p).zero_()
        return super().step(closure)


class Ascends(PlainSGD):
    def lr_of(self, group: dict[str, Any]) -> float:
        return -float(group["lr"])


def test_a_sound_optimizer_passes_every_property():
    report = check_optimizer(PlainSGD, {"lr": 0.1})
    # the evaluation contract concerns only optimizers with train()/eval()
    want = ["passed"] * (len(OPTIMIZER_PROPERTIES) - 1) + ["not applicable"]
    assert [r.outcome for r in report.results] == want


class OnlyEval(PlainSGD):
    def eval(self) -> None:
        pass


class EvalTwice(PlainSGD):
    """An averaging optimizer whose eval() moves the weights again when called twice."""

    def train(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.data.mul_(2.0)

    def eval(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.data.mul_(0.5)


@pytest.mark.parametrize(
    ("optimizer", "says"),
    [
        (OnlyEval, "only one of train() and eval()"),
        (EvalTwice, "a second eval() changed the parameters again"),
    ],
)
def test_the_evaluation_contract_is_checked(optimizer, says):
    report = check_optimizer(optimizer, {"lr": 0.1}, raise_on_failure=False)
    result = report.results[OPTIMIZER_PROPERTIES.index("evaluation_modes")]
    assert result.outcome == "failed"
    assert says in result.detail


@pytest.mark.parametrize(
    ("optimizer", "prop", "says"),
    [
        (ForgetsState, "state_round_trip", "do not continue the uninterrupted run"),
        (IgnoresGroups, "per_group_hyperparameters", "{'lr': 0.05}"),
        (TouchesFrozen, "no_grad_untouched", "whose .grad is None changed"),
        (LosesBfloat16, "dtypes", "torch.bfloat16 parameter (tensor 0) became torch.float32"),
        (DropsLoss, "closure", "returned None; the closure's loss was"),
        (SlowForLoop, "foreach_agrees", "foreach=True and foreach=False disagree"),
        (Ascends, "decreases_loss", "took it from"),
    ],
)
def test_a_broken_optimizer_fails_the_property_it_breaks(optimizer, prop, says):
    with pytest.raises(ConformanceError) as caught:
        check_optimizer(optimizer, {"lr": 0.1})
    assert caught.value.report.outcome(prop) == "failed"
    (failure,) = [r for r in caught.value.report.failures if r.name == prop]
    assert says in failure.detail
    assert f"{prop}: " in str(caught.value)
    assert str(caught.value).startswith(f"optimizer {optimizer.__name__} breaks")


def test_a_failure_gives_the_values_involved():
    with pytest.raises(ConformanceError, match=r"differs by up to [0-9.e-]+ \(element \d+: "):
        check_optimizer(ForgetsState, {"lr": 0.1})


def test_skip_needs_a_known_property_and_a_reason():
    report = check_optimizer(Ascends, {"lr": 0.1}, skip={"decreases_loss": "it is a test"})
    assert report.outcome("decreases_loss") == "skipped"
    assert "it is a test" in str(report)
    with pytest.raises(ValueError, match="unknown properties \\['decrease_loss'\\]"):
        check_optimizer(PlainSGD, {"lr": 0.1}, skip={"decrease_loss": "typo"})
    with pytest.raises(ValueError, match="needs a reason"):
        check_optimizer(PlainSGD, {"lr": 0.1}, skip={"closure": ""})


def test_an_optimizer_that_cannot_be_built_fails_once_with_the_reason():
    with pytest.raises(ConformanceError) as caught:
        check_optimizer(PlainSGD, {"learning_rate": 0.1})
    assert [r.name for r in caught.value.report.results] == ["construction"]
    assert "learning_rate" in str(caught.value)


def test_without_a_foreach_argument_foreach_does_not_apply():
    def build(params: Any, lr: float) -> PlainSGD:
        return PlainSGD(params, lr=lr)

    report = check_optimizer(build, {"lr": 0.1})
    assert report.outcome("foreach_agrees") == "not applicable"


# -- schedulers ------------------------------------------------------------------------------


def _halving(step: int, start: float) -> float:
    return start * 0.5 ** (step // 2)


class Halving:
    """A natural scheduler: halves every group's lr every 2 steps; stores its own step."""

    def __init__(self, optimizer: Any, start: float = 0.1) -> None:
        self.optimizer, self.start, self.count = optimizer, start, 0
        self._write()

    def _write(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = _halving(self.count, self.start)

    def step(self) -> None:
        self.count += 1
        self._write()

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = state["count"]
        self._write()


class ForgetfulHalving(Halving):
    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._write()


def test_a_natural_scheduler_passes_and_the_curve_does_not_apply():
    report = check_scheduler(Halving, {"start": 0.1})
    assert report.outcome("state_round_trip") == "passed"
    assert report.outcome("closed_form_matches_stepping") == "not applicable"
    assert report.outcome("tag_targeting") == "not applicable"
    assert report.outcome("nests_in_sequential") == "passed"


def test_nesting_fails_naming_plugtrain_schedulers_when_it_is_missing():
    from plugtrain.discovery import loading as plugins

    with plugins.restored_afterwards():
        plugins.reset(plugins.PluginSettings(blocked=frozenset({"schedulers"})))
        report = check_scheduler(Halving, {"start": 0.1}, raise_on_failure=False)
    assert report.outcome("nests_in_sequential") == "failed"
    (result,) = [r for r in report.results if r.name == "nests_in_sequential"]
    assert "install plugtrain-schedulers" in result.detail


def test_a_scheduler_that_does_not_resume_fails():
    with pytest.raises(ConformanceError, match=r"state_round_trip: .*resume is not exact"):
        check_scheduler(ForgetfulHalving, {"start": 0.1})


def _wrong_curve_class() -> type:
    import attrs

    from plugtrain.curve import Curve
    from plugtrain.scheduler import ScheduleSchema, tags_arg
    from plugtrain.schema import arg

    @attrs.frozen
    class SteppedArgs(ScheduleSchema):
        """lr = start / (1 + step); the class below steps another curve."""

        start: float = arg(0.1, ge=0)
        param_group_tags: Any = tags_arg()  # noqa: RUF009 - an attrs field, like arg()

        @staticmethod
        def curve(arguments: Any, child_curve: Any) -> Curve:
            return Curve(lambda e: arguments["start"] / (1 + e))

    class Lying(Scheduler):
        schema = SteppedArgs

        def _build_curve(self) -> Any:
            start = self.arguments["start"]
            return Curve(lambda e: start / (1 + 2 * e))

    return Lying


def test_a_scheduler_whose_stepping_leaves_its_closed_form_fails():
    with pytest.raises(ConformanceError) as caught:
        check_scheduler(_wrong_curve_class(), {"start": 0.1})
    (failure,) = [
        r for r in caught.value.report.failures if r.name == "closed_form_matches_stepping"
    ]
    assert "at step 1 stepping gives 0.0333" in failure.detail
    assert "the closed form 0.05" in failure.detail


class EveryGroup(Halving):
    """Takes param_group_tags but writes every group anyway."""

    def __init__(self, optimizer: Any, start: float = 0.1, param_group_tags: Any = None) -> None:
        self.param_group_tags = param_group_tags
        super().__init__(optimizer, start)

    @property
    def group_indices(self) -> list[int]:
        return list(range(len(self.optimizer.param_groups)))


def test_a_scheduler_that_ignores_its_tags_fails():
    with pytest.raises(ConformanceError, match="tag_targeting: with param_group_tags='kit_target'"):
        check_scheduler(EveryGroup, {"start": 0.1})


# -- callbacks, loggers, models, data loaders ------------------------------------------------


class Counting:
    """Counts steps; keeps the count in its state."""

    def __init__(self, start: int = 0) -> None:
        self.steps = start
        self.calls: list[str] = []

    def on_fit_start(self, trainer: Any) -> None:
        self.calls.append("start")

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.steps += 1

    def on_fit_end(self, trainer: Any) -> None:
        self.calls.append("end")

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = state["steps"]


class LosesCount(Counting):
    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Raises(Counting):
    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        raise RuntimeError("boom")


class Unsaveable(Counting):
    def state_dict(self) -> dict[str, Any]:
        return {"steps": self}


def test_a_sound_callback_passes(fresh_backend):
    report = check_callback(Counting)
    assert report.outcome("hooks_in_order") == "passed"
    assert report.outcome("state_round_trip") == "passed"


@pytest.mark.parametrize(
    ("callback", "prop", "says"),
    [
        (LosesCount, "state_round_trip", "a fresh one loading the state returns"),
        (Raises, "hooks_in_order", "RuntimeError: boom (last hook: on_train_step_end)"),
        (Unsaveable, "state_round_trip", "does not load with torch.load(weights_only=True)"),
    ],
)
def test_a_broken_callback_fails(fresh_backend, callback, prop, says):
    with pytest.raises(ConformanceError) as caught:
        check_callback(callback)
    (failure,) = [r for r in caught.value.report.failures if r.name == prop]
    assert says in failure.detail


class ListLogger:
    def __init__(self) -> None:
        self.rows: list[tuple[int, str]] = []
        self.closed = False

    def log_metrics(self, step: int, split: str, metrics: Any) -> None:
        if self.closed:
            raise RuntimeError("logged after close")
        self.rows.append((step, split))

    def close(self) -> None:
        self.closed = True


class NoClose:
    def log_metrics(self, step: int, split: str, metrics: Any) -> None:
        pass


def test_loggers(fresh_backend):
    report = check_logger(ListLogger)
    assert report.outcome("log_metrics_calls") == "passed"
    assert report.outcome("state_round_trip") == "not applicable"
    with pytest.raises(ConformanceError, match=r"it has no close\(\)"):
        check_logger(NoClose)


def test_models_and_data():
    report = check_model(
        torch.nn.Linear, {"in_features": 4, "out_features": 2}, inputs=torch.ones(3, 4)
    )
    assert [r.outcome for r in report.results] == ["passed"] * 4

    class Frozen(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = torch.nn.Linear(4, 2)
            self.unused = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    with pytest.raises(ConformanceError, match=r"gradients: no finite gradient reaches .*unused"):
        check_model(Frozen, inputs=torch.ones(3, 4))

    def pairs(n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.randn(2, 3), torch.zeros(2)) for _ in range(n)]

    assert check_dataloader(pairs).outcome("deterministic") == "passed"

    def singles() -> list[torch.Tensor]:
        return [torch.zeros(2)]

    with pytest.raises(ConformanceError, match="batch 0 is Tensor, not an"):
        check_dataloader(singles)


class HalfABackend:
    """Has a device and nothing else of the Backend protocol."""

    device = torch.device("cpu")

    @classmethod
    def processes_per_node(cls, arguments: Any) -> int:
        return 0


def test_a_backend_missing_members_fails(fresh_backend):
    report = check_backend(HalfABackend, raise_on_failure=False)
    assert report.outcome("protocol") == "failed"
    (protocol,) = [r for r in report.failures if r.name == "protocol"]
    assert "'is_main_process'" in protocol.detail
    (count,) = [r for r in report.failures if r.name == "processes_per_node"]
    assert count.detail == "processes_per_node({}) returned 0"
