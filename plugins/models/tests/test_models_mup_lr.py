"""muP's per-group learning rates reach the optimizer from the model, as in Model Zoo.

A muP decoder (``mup_base_hidden_size``, ``mup_base_filter_size``) declares its factors through
plugtrain's optional ``learning_rate_factors()``; a run file needs no ``adjust_learning_rate``
for them (Model Zoo's muP run files write none), and the run file's own entries win.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.builtin.text import stdlib_text_loader
from plugtrain.config import load_yaml, plan_run
from plugtrain.discovery import loading as plugins
from plugtrain.train.assembly.trainers import build_trainer

pytest.importorskip("plugtrain_schedulers", reason="ScalePerParamLR comes from it")

# w = hidden / base = 4, f = filter / base = 2
RUN = """\
trainer:
  init:
    backend: {{backend_type: CPU}}
    model_dir: {model_dir}
    seed: 3
    model:
      name: gpt3
      vocab_size: 256
      hidden_size: 64
      num_hidden_layers: 2
      num_heads: 4
      filter_size: 128
      max_position_embeddings: 16
      dropout_rate: 0.0
      mup_base_hidden_size: 16
      mup_base_filter_size: 64
    optimizer:
      AdamW:
        lr: 0.01
        weight_decay: 0.1
{adjust}
    schedulers:
    - LinearLR: {{initial_learning_rate: 0.01, end_learning_rate: 0.001, total_iters: 3}}
    loop: {{max_steps: 3}}
    checkpoint: {{steps: 3}}
    logging: {{log_steps: 1, progress: false}}
  fit:
    train_dataloader: {{StdlibText: {{batch_size: 2, block_size: 16}}}}
"""
MUP = "{decoder_attention: 0.25, decoder_input_ffn: 0.25, decoder_output_ffn: 0.5}"


def _trainer(tmp_path: Path, name: str, adjust: str = "") -> Any:
    written = f"        adjust_learning_rate: {adjust}" if adjust else ""
    path = tmp_path / f"{name}.yaml"
    path.write_text(RUN.format(model_dir=tmp_path / name, adjust=written))
    plan = plan_run(load_yaml(path.read_text(), str(path)), plugins.get_registry(), str(path))
    return build_trainer(plan.trainers[0], plugins.get_registry(), {})


def _factors(trainer: Any) -> dict[str, float]:
    return {
        name: group["adjust_learning_rate"]
        for group in trainer.optimizer.param_groups
        for name in group["param_names"]
    }


def _expected(name: str) -> float:
    if name.endswith("bias") or "embedding" in name or "norm" in name or "ln_f" in name:
        return 1.0
    if ".self_attn." in name or ".ffn.ffn.0." in name:
        return 0.25  # 1/w
    assert ".ffn.ffn.1." in name, name
    return 0.5  # 1/f


def test_a_mup_run_file_gets_mups_per_group_learning_rates(tmp_path, fresh_backend):
    trainer = _trainer(tmp_path, "implicit")
    factors = _factors(trainer)
    names = [name for name, _ in trainer.model.named_parameters()]
    assert sorted(factors) == sorted(names)
    assert factors == {name: _expected(name) for name in names}
    assert sorted(set(factors.values())) == [0.25, 0.5, 1.0]
    (scheduler,) = trainer.schedulers
    assert type(scheduler).__name__ == "ScalePerParamLR"
    lrs = {n: g["lr"] for g in trainer.optimizer.param_groups for n in g["param_names"]}
    first = "model.transformer_decoder.layers.0"
    assert lrs[f"{first}.self_attn.proj_q_dense_layer.weight"] == pytest.approx(0.0025)
    assert lrs[f"{first}.ffn.ffn.1.linear_layer.weight"] == pytest.approx(0.005)
    assert lrs["model.embedding_layer.word_embeddings.weight"] == pytest.approx(0.01)


def test_it_trains_bit_for_bit_as_the_explicit_adjust_learning_rate(tmp_path, fresh_backend):
    data = stdlib_text_loader(batch_size=2, block_size=16, max_bytes=20_000, shuffle=False)
    weights = {}
    for name, adjust in (("implicit", ""), ("explicit", MUP)):
        trainer = _trainer(tmp_path, name, adjust)
        trainer.fit(data, ckpt_path=None)
        weights[name] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    assert weights["implicit"].keys() == weights["explicit"].keys()
    for key, value in weights["implicit"].items():
        assert torch.equal(value, weights["explicit"][key]), key
    start = _trainer(tmp_path, "start").model.state_dict()
    name = "model.transformer_decoder.layers.0.self_attn.proj_q_dense_layer.weight"
    assert not torch.equal(weights["implicit"][name], start[name])  # it did train


def test_the_run_files_entries_win_over_the_models(tmp_path, fresh_backend):
    factors = _factors(_trainer(tmp_path, "override", "{decoder_output_ffn: 0.125}"))
    out = "model.transformer_decoder.layers.1.ffn.ffn.1.linear_layer.weight"
    attention = "model.transformer_decoder.layers.1.self_attn.proj_v_dense_layer.weight"
    assert factors[out] == 0.125
    assert factors[attention] == 0.25  # the model's, for what the run file does not name
    assert factors["model.embedding_layer.word_embeddings.weight"] == 1.0
    plain = _trainer(tmp_path, "plain", "{decoder_kernel: 1.0}")
    assert set(_factors(plain).values()) == {1.0}


def test_a_model_without_mup_has_no_factors():
    from plugtrain_models.families import build_decoder

    model = build_decoder("gpt3", {"hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1})
    assert model.learning_rate_factors() == {}
    mup = build_decoder(
        "gpt3",
        {
            "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1, "filter_size": 64,
            "mup_base_hidden_size": 8, "mup_base_filter_size": 32,
        },
    )  # fmt: skip
    assert mup.learning_rate_factors() == {
        "decoder_attention": 0.25, "decoder_input_ffn": 0.25, "decoder_output_ffn": 0.5,
    }  # fmt: skip
