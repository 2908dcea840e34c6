"""Honest throughput: MFU never above 1, loss tokens/s beside all tokens/s, kept after a resume."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.train.observability.throughput import Throughput, loss_tokens_in
from plugtrain.train.trainer import Trainer

pytest.importorskip("plugtrain_models")


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """One torch thread: the models are tiny and the machine's two cores are shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _batches() -> list[dict[str, torch.Tensor]]:
    """Padded rows: each has 8 positions, of which the loss takes the last 3 (a completion)."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(8):
        ids = torch.randint(0, 50, (2, 8), generator=generator)
        labels = torch.full_like(ids, -100)
        labels[:, 5:] = ids[:, 5:]
        rows.append({"input_ids": ids, "labels": labels})
    return rows


def _trainer(model_dir: Path, steps: int, **throughput: Any) -> Trainer:
    from plugtrain_models.gpt import GPT

    torch.manual_seed(0)
    return Trainer(
        model=GPT(vocab_size=50, n_layer=1, n_head=2, n_embd=16, block_size=8),
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.05),
        loop={"max_steps": steps},
        logging={"log_steps": 1},
        checkpoint={"steps": 2},
        model_dir=model_dir,
        callbacks=[Throughput(**throughput)],
    )


def _train_records(model_dir: Path) -> list[dict[str, Any]]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == "train"]


def test_loss_tokens_are_counted_from_the_mask_else_the_labels() -> None:
    ids = torch.zeros(2, 4, dtype=torch.long)
    labels = torch.tensor([[-100, 1, 2, -100], [3, -100, -100, -100]])
    assert loss_tokens_in({"input_ids": ids, "labels": labels}) == 3
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert loss_tokens_in({"input_ids": ids, "labels": labels, "loss_mask": mask}) == 6
    assert loss_tokens_in((ids, labels)) == 0


def test_loss_tokens_per_sec_beside_tokens_and_both_kept_after_a_resume(tmp_path: Path) -> None:
    _trainer(tmp_path, 2, peak_flops=1e15).fit(_batches())
    resumed = _trainer(tmp_path, 5, peak_flops=1e15)
    resumed.fit(_batches())
    assert resumed.loaded_step == 2
    records = {r["step"]: r for r in _train_records(tmp_path)}
    for step in (4, 5):  # after the resume, as in an uninterrupted run
        record = records[step]
        share = record["device/loss_tokens_per_sec"] / record["device/tokens_per_sec"]
        assert share == pytest.approx(3 / 8)
        assert 0 < record["device/mfu"] <= 1


def test_mfu_above_one_is_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        _trainer(tmp_path, 3, peak_flops=1.0).fit(_batches())  # a peak far too low
    last = _train_records(tmp_path)[-1]
    assert last["device/flops_per_sec"] > 1.0
    assert "device/mfu" not in last
    assert caplog.text.count("MFU is not reported") == 1
