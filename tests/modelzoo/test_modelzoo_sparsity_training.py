"""Model Zoo's six GPT-3 sparsity sections train on CPU (model and data replaced, as the corpus).

The corpus files (tests/data/modelzoo) keep Cerebras' keys with plugtrain's ``MLP`` and digits
in place of the model and data. Here the model is replaced once more, on the command line, by a
small ``GPT`` of plugtrain-models (whose parameters carry Model Zoo's names) on ``StdlibText``
bytes, so
Cerebras' own ``param_filter`` globs (``*proj_[qkv]_dense_layer.weight`` ...) select what they
select in Model Zoo. The step counts are small; dynamic algorithms update every 2 steps instead
of every 100 or 500. Skipped when plugtrain-models is not installed.
"""

from __future__ import annotations

import pytest
import torch
from support.paths import DATA

from plugtrain.cli import main

pytest.importorskip("plugtrain_models", reason="plugtrain-models (the GPT) is not installed")

CORPUS = DATA / "modelzoo"

VAL = "{StdlibText: {batch_size: 4, block_size: 16, split: val}}"

# (file, level, dynamic)
SIX = [
    ("gpt3_125m_static75.yaml", 0.75, False),
    ("gpt3_125m_set75.yaml", 0.75, True),
    ("gpt3_125m_rigl75.yaml", 0.75, True),
    ("gpt3_125m_sparsewide-ift_static50.yaml", 0.5, False),
    ("gpt3_125m_sparsewide-ift_rigl75.yaml", 0.75, True),
    ("gpt3_6p7b_vspdf_phase1.yaml", 0.9, False),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "level", "dynamic"), SIX)
def test_a_model_zoo_sparsity_config_trains_on_cpu(
    name, level, dynamic, tmp_path, monkeypatch, fresh_backend, capsys
):
    monkeypatch.chdir(tmp_path)
    overrides = [
        "trainer.init.backend.backend_type=CPU",
        "trainer.init.loop.max_steps=4",
        "trainer.init.loop.eval_steps=1",
        "trainer.init.checkpoint.steps=2",
        "trainer.init.model={GPT: {vocab_size: 256, n_layer: 1, n_head: 2, n_embd: 32,"
        " block_size: 16}}",
        "trainer.fit.train_dataloader={StdlibText: {batch_size: 4, block_size: 16}}",
        f"trainer.fit.val_dataloader={VAL}",
        f"trainer.validate.val_dataloader={VAL}",
        f"trainer.validate_all.val_dataloaders={VAL}",
    ]
    if dynamic:
        overrides.append("trainer.init.sparsity.update.freq=2")
    arguments = ["fit", str(CORPUS / name)]
    for override in overrides:
        arguments += ["--set", override]
    status = main(arguments)
    assert status == 0, capsys.readouterr().err
    saved = torch.load(tmp_path / "model_dir" / "checkpoint_4.mdl", weights_only=True)
    masks = {k: v for k, v in saved["model"].items() if k.endswith("_mask")}
    assert sorted(masks) == [
        f"model.transformer_decoder.layers.0.{layer}.weight_mask"
        for layer in (
            "ffn.ffn.0.linear_layer",
            "ffn.ffn.1.linear_layer",
            "self_attn.proj_k_dense_layer",
            "self_attn.proj_output_dense_layer",
            "self_attn.proj_q_dense_layer",
            "self_attn.proj_v_dense_layer",
        )
    ]
    for key, mask in masks.items():
        weight = saved["model"][key[: -len("_mask")]]
        assert int(mask.sum()) == int((1 - level) * mask.numel()), key
        assert torch.count_nonzero(weight[~mask]) == 0, key
    expected = [{"step": torch.tensor(4), "sparsity": {}}] if dynamic else [{}]
    assert saved["sparsity"] == expected
