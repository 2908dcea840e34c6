"""The loop asks the backend's parallel strategy for one synchronising context per step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.strategy import ParallelStrategy, strategy_of
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


class RecordingStrategy(ParallelStrategy):
    """Records, per optimizer step, whether each micro-batch's context synchronises."""

    def __init__(self, backend: Any) -> None:
        super().__init__(backend)
        self.calls: list[bool] = []
        self.inside = 0

    @contextlib.contextmanager
    def micro_batch_context(self, model: Any, *, synchronize: bool) -> Iterator[None]:
        self.calls.append(synchronize)
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1


def _backend_with(strategy_class: type[ParallelStrategy]) -> Any:
    cpu = plugtrain.resolve("backend", "CPU")

    class RecordingCPU(cpu):  # type: ignore[misc, valid-type]
        def parallel_strategy(self) -> ParallelStrategy:
            return strategy_class(self)

    return RecordingCPU()


@pytest.mark.parametrize("accum", [1, 4])
def test_one_synchronising_context_per_optimizer_step(tmp_path: Any, accum: int) -> None:
    backend = _backend_with(RecordingStrategy)
    sgd = plugtrain.resolve("optimizer", "SGD")
    trainer = Trainer(
        backend=backend,
        model_dir=tmp_path / "run",
        model=lambda: MLP(in_features=16, out_features=4, hidden=8),
        optimizer=lambda model: sgd(model.parameters(), lr=0.1),
        loop={"max_steps": 5, "grad_accum_steps": accum},
        seed=0,
    )
    strategy = trainer.strategy
    assert isinstance(strategy, RecordingStrategy)
    data = synthetic_loader(batch_size=4, num_examples=64, in_features=16, num_classes=4)
    trainer.fit(data)
    steps = [strategy.calls[i : i + accum] for i in range(0, len(strategy.calls), accum)]
    assert len(steps) == 5
    assert all(step == [False] * (accum - 1) + [True] for step in steps)
    assert strategy.inside == 0


def test_a_backend_without_a_strategy_gets_the_default_one() -> None:
    class Minimal:
        is_main_process = False

        def prepare_model(self, model: Any) -> Any:
            return ("prepared", model)

        def reduce_sums(self, sums: Any) -> dict[str, float]:
            return {name: value * 2 for name, value in sums.items()}

    strategy = strategy_of(Minimal())
    assert type(strategy) is ParallelStrategy
    assert strategy.wrap_model("m") == ("prepared", "m")
    assert strategy.reduce_sums({"loss": 1.5}) == {"loss": 3.0}
    assert strategy.is_writer is False
    with strategy.micro_batch_context(None, synchronize=False):
        pass
