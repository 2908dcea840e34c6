"""The batch and loss contract: tuple, mapping and object batches; loss, mapping or outputs."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import namedtuple
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

from plugtrain.errors import TrainingError
from plugtrain.train.loop.batches import MetricSums, batch_size, move_batch, score_batch
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


class MappingModel(nn.Module):
    """Computes its own loss from ``{"x", "y"}``; reports a metric and its example count."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        error = (self.linear(batch["x"]).squeeze(-1) - batch["y"]) ** 2
        return {
            "loss": error.mean(),
            "abs_error": error.detach().sqrt().mean(),
            "num_examples": len(batch["y"]),
            "predictions": error.detach(),  # not a scalar: not a metric
        }


@dataclasses.dataclass
class Pairs:
    """An object batch: not a tuple, not a mapping."""

    x: torch.Tensor
    y: torch.Tensor


class ObjectModel(nn.Module):
    """Returns a scalar loss for a :class:`Pairs` batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, batch: Pairs) -> torch.Tensor:
        return ((self.linear(batch.x).squeeze(-1) - batch.y) ** 2).mean()


class KeywordModel(nn.Module):
    """Hugging Face's call: ``model(**batch)``."""

    batch_as_kwargs: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": nn.functional.cross_entropy(self.linear(x), labels)}


class LogitsModel(nn.Module):
    """Returns class logits; the Trainer scores them against the batch's ``labels``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 4)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.linear(batch["x"])


def _data(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=generator)
    return x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1


def _mapping_batches(sizes: list[int]) -> list[dict[str, torch.Tensor]]:
    x, y = _data(sum(sizes))
    batches, start = [], 0
    for size in sizes:
        batches.append({"x": x[start : start + size], "y": y[start : start + size]})
        start += size
    return batches


def _trainer(tmp_path, model: nn.Module, **settings: Any) -> Trainer:
    return Trainer(
        device="CPU",
        model_dir=tmp_path / "model",
        model=model,
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        logging={"log_steps": 1, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
        **settings,
    )


def _records(tmp_path, split: str) -> list[dict[str, Any]]:
    text = (tmp_path / "model" / "metrics.jsonl").read_text()
    return [r for r in map(json.loads, text.splitlines()) if r["split"] == split]


def test_a_pair_batch_is_scored_by_the_loss_function_with_accuracy():
    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    x = torch.randn(6, 3)
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    scored = score_batch(model, (x, y), nn.functional.cross_entropy, _no_autocast)
    outputs = model(x)
    assert torch.equal(scored.loss, nn.functional.cross_entropy(outputs, y))
    assert scored.correct == int((outputs.argmax(-1) == y).sum())
    assert (scored.count, scored.weight, scored.metrics) == (6, 6, {})


def test_a_mapping_model_gives_its_loss_metrics_and_count():
    model = MappingModel()
    batch = _mapping_batches([5])[0]
    scored = score_batch(model, batch, _no_loss_fn, _no_autocast)
    expected = model(batch)
    assert torch.equal(scored.loss, expected["loss"])
    assert scored.weight == 5
    assert scored.metrics == {"abs_error": pytest.approx(float(expected["abs_error"]))}


def test_an_object_batch_and_a_scalar_loss():
    model = ObjectModel()
    x, y = _data(4)
    scored = score_batch(model, Pairs(x, y), _no_loss_fn, _no_autocast)
    assert torch.equal(scored.loss, model(Pairs(x, y)))
    assert scored.weight == 1  # no tensor in the batch to count: it counts one


def test_a_keyword_model_is_called_with_the_mapping_unpacked():
    model = KeywordModel()
    x, _ = _data(4)
    labels = torch.tensor([0, 1, 2, 3])
    scored = score_batch(model, {"x": x, "labels": labels}, _no_loss_fn, _no_autocast, True)
    expected = nn.functional.cross_entropy(model.linear(x), labels)
    assert torch.equal(scored.loss, expected)


def test_outputs_for_a_mapping_batch_are_scored_against_its_labels():
    model = LogitsModel()
    x, _ = _data(4)
    labels = torch.tensor([0, 1, 2, 3])
    scored = score_batch(
        model, {"x": x, "labels": labels}, nn.functional.cross_entropy, _no_autocast
    )
    assert torch.equal(scored.loss, nn.functional.cross_entropy(model({"x": x}), labels))
    assert scored.count == 4


def test_outputs_with_nothing_to_score_them_against_is_a_clear_error():
    with pytest.raises(
        TrainingError, match="returned a tensor of shape \\(4, 4\\) for a dict batch"
    ):
        score_batch(LogitsModel(), {"x": _data(4)[0]}, _no_loss_fn, _no_autocast)


def test_batches_of_any_shape_move_to_the_device():
    meta = torch.device("meta")
    Pair = namedtuple("Pair", "inputs targets")
    x = torch.ones(2, 3)

    class Movable:
        def to(self, device: torch.device) -> str:
            return f"moved to {device}"

    moved = move_batch(
        {"a": [x, (x,)], "b": Pairs(x, x), "c": Pair(x, x), "d": Movable(), "e": 3}, meta
    )
    assert moved["a"][0].device == moved["a"][1][0].device == meta
    assert isinstance(moved["b"], Pairs)
    assert moved["b"].y.device == meta
    assert isinstance(moved["c"], Pair)
    assert moved["c"].targets.device == meta
    assert (moved["d"], moved["e"]) == ("moved to meta", 3)


def test_batch_size_reads_a_mapping_s_first_tensor():
    assert batch_size({"n": "text", "x": torch.zeros(7, 2)}) == 7
    assert batch_size((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_size(Pairs(torch.zeros(3), torch.zeros(3))) == 1


def test_evaluation_weights_each_batch_by_its_count(tmp_path):
    sizes = [5, 2, 9]
    batches = _mapping_batches(sizes)
    trainer = _trainer(tmp_path, MappingModel())
    metrics = trainer.validate(batches, ckpt_path=None)
    model = trainer.model
    with torch.no_grad():
        results = [model(b) for b in batches]
    total = sum(sizes)
    loss = sum(float(r["loss"]) * n for r, n in zip(results, sizes, strict=True)) / total
    error = sum(float(r["abs_error"]) * n for r, n in zip(results, sizes, strict=True)) / total
    assert metrics["loss"] == pytest.approx(loss, rel=1e-6)
    assert metrics["abs_error"] == pytest.approx(error, rel=1e-6)
    assert not {"predictions", "num_examples"} & set(metrics)
    x, y = _data(total)
    with torch.no_grad():  # the same as one batch of everything
        whole = model({"x": x, "y": y})
    assert metrics["loss"] == pytest.approx(float(whole["loss"]), rel=1e-5)


def _train(tmp_path, batches: list[Any], accum: int, model: nn.Module) -> Trainer:
    torch.manual_seed(3)
    trainer = _trainer(
        tmp_path, model, loop={"max_steps": len(batches) // accum, "grad_accum_steps": accum}
    )
    trainer.fit(batches)
    return trainer


@pytest.mark.parametrize("accum", [2, 4])
def test_accumulated_micro_batches_equal_one_batch_of_them_all(tmp_path, accum):
    torch.manual_seed(1)
    start = MappingModel().state_dict()
    whole = MappingModel()
    whole.load_state_dict(start)
    combined = _mapping_batches([8] * 2)
    one = _train(tmp_path / "one", combined, 1, whole)
    split = [
        {k: v[i : i + 8 // accum] for k, v in b.items()}
        for b in combined
        for i in range(0, 8, 8 // accum)
    ]
    parts = MappingModel()
    parts.load_state_dict(start)
    accumulated = _train(tmp_path / "acc", split, accum, parts)
    for mine, theirs in zip(accumulated.model.parameters(), one.model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    logged = _records(tmp_path / "acc", "train")
    expected = _records(tmp_path / "one", "train")
    assert [r["step"] for r in logged] == [1, 2]
    for mine, theirs in zip(logged, expected, strict=True):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
        assert mine["abs_error"] == pytest.approx(theirs["abs_error"], rel=1e-5)


def test_training_logs_a_model_s_metrics_like_its_loss(tmp_path):
    batches = _mapping_batches([4, 4, 4])
    trainer = _trainer(tmp_path, MappingModel(), loop={"max_steps": 3})
    trainer.fit(batches, batches)
    train = _records(tmp_path, "train")
    assert all(math.isfinite(r["abs_error"]) for r in train)
    assert "predictions" not in train[0]
    assert set(_records(tmp_path, "val")[0]) >= {"loss", "abs_error"}


def test_an_object_batch_trains(tmp_path):
    x, y = _data(12)
    batches = [Pairs(x[i : i + 4], y[i : i + 4]) for i in range(0, 12, 4)]
    trainer = _trainer(tmp_path, ObjectModel(), loop={"max_steps": 6})
    before = trainer.validate(batches, ckpt_path=None)["loss"]
    trainer.fit(batches)
    assert trainer.validate(batches, ckpt_path=None)["loss"] < before


def test_metric_sums_reduce_to_weighted_means():
    sums = MetricSums()
    sums.add({"m": 1.0}, 3)
    other = MetricSums()
    other.add({"m": 5.0}, 1)
    sums.merge(other)
    assert MetricSums.means(sums.totals()) == {"m": 2.0}


def _no_autocast() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _no_loss_fn(outputs: Any, targets: Any) -> torch.Tensor:
    raise AssertionError("the loss function was called")


def test_the_conformance_kit_checks_mapping_batches_and_loss_mappings():
    from plugtrain.testing import check_dataloader, check_model

    def uneven() -> list[dict[str, torch.Tensor]]:
        return [{"x": torch.zeros(4, 3), "y": torch.zeros(3)}]

    report = check_dataloader(uneven, raise_on_failure=False)
    assert report.outcome("yields_pairs") == "failed"
    report = check_dataloader(lambda: _mapping_batches([4, 4]), raise_on_failure=False)
    assert report.outcome("yields_pairs") == "passed"
    batch = _mapping_batches([4])[0]
    report = check_model(MappingModel, inputs=batch, raise_on_failure=False)
    assert [report.outcome(p) for p in ("forward", "state_round_trip", "gradients")] == [
        "passed"
    ] * 3
