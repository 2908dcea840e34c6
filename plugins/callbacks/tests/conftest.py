"""Shared helpers of the plugtrain-callbacks tests: a tiny real Trainer and its metrics."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.train.trainer import Trainer

BATCH = 8


@pytest.fixture
def make_trainer(tmp_path: Path, fresh_backend: None) -> Callable[..., Trainer]:
    """``make_trainer(**changes)``: an MLP on CPU with SGD, logging every 2 steps."""

    def make(**changes: Any) -> Trainer:
        sgd = plugtrain.resolve("optimizer", "SGD")
        arguments: dict[str, Any] = {
            "device": "CPU",
            "model_dir": tmp_path / "run",
            "model": lambda: MLP(in_features=8, out_features=3, hidden=16, depth=2),
            "optimizer": lambda model: sgd(model.parameters(), lr=0.1, momentum=0.9),
            "loop": {"max_steps": 6},
            "checkpoint": {"steps": 2},
            "logging": {"log_steps": 2},
            "seed": 11,
        }
        arguments.update(changes)
        return Trainer(**arguments)

    return make


def data(split: str = "train", batch_size: int = BATCH) -> Any:
    """Seeded synthetic classification data matching the trainer's MLP."""
    return synthetic_loader(
        batch_size=batch_size, num_examples=64, in_features=8, num_classes=3, split=split
    )


@pytest.fixture
def train_data() -> Callable[..., Any]:
    """``train_data(split="train")``: the data loader of :func:`data`."""
    return data


def read_rows(model_dir: Path, split: str = "train") -> list[dict[str, Any]]:
    """The records of ``split`` in ``model_dir/metrics.jsonl``."""
    lines = (model_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


@pytest.fixture
def rows() -> Callable[..., list[dict[str, Any]]]:
    """``rows(model_dir, split="train")``: the metrics records of a run."""
    return read_rows
