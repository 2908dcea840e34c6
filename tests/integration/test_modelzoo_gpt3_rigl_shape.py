"""``examples/modelzoo_gpt3_rigl_shape.yaml`` (Model Zoo's GPT-3 RigL shape) checks and trains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from plugtrain.cli import main

pytest.importorskip("plugtrain_models", reason="plugtrain-models (the GPT) is not installed")

RUN = Path(__file__).resolve().parents[2] / "examples" / "modelzoo_gpt3_rigl_shape.yaml"
MODEL_DIR = Path("runs/modelzoo_gpt3_rigl_shape")
# A narrower GPT and shorter sequences than the file's keep the test short; the layer names, and
# so what Model Zoo's globs select, are the same.
SMALLER = [
    "trainer.init.model.GPT.n_embd=32",
    "trainer.init.model.GPT.block_size=32",
    "trainer.fit.train_dataloader.StdlibText.block_size=32",
    "trainer.fit.train_dataloader.StdlibText.batch_size=8",
    "trainer.fit.val_dataloader.StdlibText.block_size=32",
]


@pytest.mark.slow
def test_it_checks_and_trains_with_rigl_on_model_zoos_globs(
    tmp_path, monkeypatch, fresh_backend, capsys
):
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(RUN)]) == 0
    assert "modelzoo_gpt3_rigl_shape.yaml: OK (1 trainer)" in capsys.readouterr().out
    arguments = ["fit", str(RUN)]
    for override in SMALLER:
        arguments += ["--set", override]
    assert main(arguments) == 0, capsys.readouterr().err
    middle = torch.load(MODEL_DIR / "checkpoint_60.mdl", weights_only=True)
    last = torch.load(MODEL_DIR / "checkpoint_120.mdl", weights_only=True)
    assert last["sparsity"] == [{"step": torch.tensor(120), "sparsity": {}}]
    sparse = sorted(key.removesuffix("_mask") for key in last["model"] if key.endswith("_mask"))
    # Q, K, V, output and the two feed-forward weights of each of the two blocks; embeddings,
    # norms, biases and the (tied) head stay dense.
    assert len(sparse) == 12
    assert all(
        name.endswith(("dense_layer.weight", "linear_layer.weight"))
        and name.startswith("model.transformer_decoder.layers.")
        for name in sparse
    ), sparse
    for name in sparse:
        mask = last["model"][name + "_mask"]
        assert int(mask.sum()) == int(0.25 * mask.numel()), name
        assert torch.count_nonzero(last["model"][name][~mask]) == 0, name
        # updates after steps 70 and 80 moved the masks (none from 90 on: stop 90)
        assert not torch.equal(mask, middle["model"][name + "_mask"]), name
    records = [json.loads(line) for line in (MODEL_DIR / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train[-1]["sparsity/" + _common_prefix(sparse) + "*/target"] == 0.75
    assert {name: train[-1][f"sparsity/{name}/actual"] for name in sparse} == dict.fromkeys(
        sparse, 0.75
    )
    losses = [r["loss"] for r in train]
    assert losses[-1] < losses[0] - 1.0  # it learns while sparse


def _common_prefix(names: list[str]) -> str:
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]
