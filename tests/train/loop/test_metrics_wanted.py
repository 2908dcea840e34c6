"""A model's optional ``metrics_wanted``: told which training steps log their metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn

from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


class SelectiveModel(nn.Module):
    """Reports ``abs_error`` only when asked; remembers what each forward was told."""

    metrics_wanted = True

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)
        self.seen: list[tuple[bool, bool]] = []  # (training, metrics_wanted) per forward

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        self.seen.append((self.training, self.metrics_wanted))
        error = (self.linear(batch["x"]).squeeze(-1) - batch["y"]) ** 2
        result: dict[str, Any] = {"loss": error.mean(), "num_examples": len(batch["y"])}
        if self.metrics_wanted or not self.training:
            result["abs_error"] = error.detach().sqrt().mean()
        return result


class PlainModel(nn.Module):
    """A model without the attribute: the Trainer must not give it one."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        error = (self.linear(batch["x"]).squeeze(-1) - batch["y"]) ** 2
        return {"loss": error.mean(), "abs_error": error.detach().sqrt().mean()}


def _batches(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4 * count, 3, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 0.5])
    return [{"x": x[i : i + 4], "y": y[i : i + 4]} for i in range(0, 4 * count, 4)]


def _fit(tmp_path, model: nn.Module, steps: int, log_steps: int, accum: int = 1) -> list[dict]:
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path / "model",
        model=model,
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.01),
        logging={"log_steps": log_steps, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
        loop={"max_steps": steps, "grad_accum_steps": accum},
    )
    trainer.fit(_batches(steps * accum))
    text = (tmp_path / "model" / "metrics.jsonl").read_text()
    return [r for r in map(json.loads, text.splitlines()) if r["split"] == "train"]


def test_only_the_logged_steps_ask_for_metrics(tmp_path):
    model = SelectiveModel()
    records = _fit(tmp_path, model, steps=7, log_steps=3)
    # steps 3 and 6 log, and the last step (7) does
    assert [wanted for _, wanted in model.seen] == [False, False, True, False, False, True, True]
    assert all(training for training, _ in model.seen)
    assert [r["step"] for r in records] == [3, 6, 7]
    assert all("abs_error" in r for r in records)
    assert model.metrics_wanted is True  # the model's own value again after the fit


def test_every_micro_batch_of_a_logged_step_is_asked(tmp_path):
    model = SelectiveModel()
    _fit(tmp_path, model, steps=2, log_steps=2, accum=2)
    assert [wanted for _, wanted in model.seen] == [False, False, True, True]


def test_a_logged_metric_is_the_mean_over_the_micro_batches_that_computed_it(tmp_path):
    torch.manual_seed(0)
    model = SelectiveModel()
    records = _fit(tmp_path, model, steps=4, log_steps=4)
    # only step 4 computed abs_error: the record is that step's value, not a mean with zeros
    torch.manual_seed(0)
    replay = SelectiveModel()
    optimizer = torch.optim.SGD(replay.parameters(), lr=0.01)
    for batch in _batches(4):
        replay.zero_grad()
        result = replay(batch)
        result["loss"].backward()
        optimizer.step()
    assert records[0]["abs_error"] == pytest.approx(float(result["abs_error"]), rel=1e-6)


def test_a_model_without_the_attribute_is_left_alone(tmp_path):
    model = PlainModel()
    records = _fit(tmp_path, model, steps=3, log_steps=3)
    assert not hasattr(model, "metrics_wanted")
    assert [r["step"] for r in records] == [3]
    assert "abs_error" in records[0]
