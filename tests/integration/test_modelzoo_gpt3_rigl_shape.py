"""``examples/modelzoo_gpt3_rigl_shape.yaml`` (Model Zoo's GPT-3 RigL shape) checks and trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from plugtrain.cli import main

RUN = Path(__file__).resolve().parents[2] / "examples" / "modelzoo_gpt3_rigl_shape.yaml"
MODEL_DIR = Path("runs/modelzoo_gpt3_rigl_shape")


@pytest.mark.slow
def test_it_checks_and_trains_with_rigl(tmp_path, monkeypatch, fresh_backend, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(RUN)]) == 0
    assert "modelzoo_gpt3_rigl_shape.yaml: OK (1 trainer)" in capsys.readouterr().out
    assert main(["fit", str(RUN)]) == 0, capsys.readouterr().err
    middle = torch.load(MODEL_DIR / "checkpoint_60.mdl", weights_only=True)
    last = torch.load(MODEL_DIR / "checkpoint_120.mdl", weights_only=True)
    assert last["sparsity"] == [{"step": torch.tensor(120), "sparsity": {}}]
    names = ["fc1.weight", "fc2.weight", "fc3.weight"]
    for name in names:
        mask = last["model"][name + "_mask"]
        assert int(mask.sum()) == int(0.25 * mask.numel())
        assert torch.count_nonzero(last["model"][name][~mask]) == 0
        # updates after steps 70 and 80 moved the masks (none from 90 on: stop 90)
        assert not torch.equal(mask, middle["model"][name + "_mask"])
    records = [json.loads(line) for line in (MODEL_DIR / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train[-1]["sparsity/fc*/target"] == 0.75
    assert {name: train[-1][f"sparsity/{name}/actual"] for name in names} == {
        "fc1.weight": 0.75,
        "fc2.weight": 0.75,
        "fc3.weight": pytest.approx(1 - int(0.25 * 640) / 640),
    }
