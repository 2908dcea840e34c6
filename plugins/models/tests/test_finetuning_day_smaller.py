"""Smaller fine-tuning fixes: the converted section names the model asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytest.importorskip("transformers")

import transformers
from support.hf_models import random_hf_model, save_hf

from plugtrain.cli import main

GPT2 = {"vocab_size": 64, "n_positions": 32, "n_embd": 16, "n_layer": 1, "n_head": 2}


@pytest.mark.parametrize(("asked", "written"), [("gpt3", "gpt3"), ("gpt2", "gpt2"), (None, "gpt2")])
def test_convert_writes_the_model_name_asked_for(
    asked: str | None, written: str, tmp_path: Path
) -> None:
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **GPT2)
    folder = save_hf(hf, tmp_path / "gpt")
    model = [] if asked is None else ["--model", asked]
    common = ["--src-fmt", "hf", "--tgt-fmt", "plugtrain", "--config", str(folder / "config.json")]
    convert = ["checkpoint", "convert", str(folder), *model, *common]
    assert main([*convert, "--output-dir", str(tmp_path / "w")]) == 0
    section = yaml.safe_load((tmp_path / "w/config_to_plugtrain.yaml").read_text())["model"]
    assert section["name"] == written
    assert (
        main(
            [
                "checkpoint",
                "convert-config",
                str(folder / "config.json"),
                *model,
                *common[:4],
                "--output-dir",
                str(tmp_path / "c"),
            ]
        )
        == 0
    )
    section = yaml.safe_load((tmp_path / "c/config_to_plugtrain.yaml").read_text())["model"]
    assert section["name"] == written


DEEP = """\
trainer:
  init:
    backend: {backend_type: CPU, data_parallel: fsdp2}
    model:
      name: llama
      vocab_size: 1024
      hidden_size: 256
      filter_size: 512
      num_hidden_layers: 2
      num_heads: 4
      max_position_embeddings: 32
    optimizer:
      AdamW: {lr: 0.001}
    loop: {max_steps: 2}
CALLBACKS
  fit:
    train_dataloader:
      Digits: {batch_size: 2}
"""
LORA_CALLBACK = """\
    callbacks:
      - Lora: {lora_params: {r: 4, alpha: 8, target_modules: [TransformerDecoderLayer, Linear]}}
"""


def _deep_mib(run: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, float]:
    assert main(["check", str(run), "--world-size", "2", "--deep"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "ddp would hold" in x)
    parts = line.split(": ", 2)[2].replace("; ", ", ").split(", ")
    return {p.rsplit(" ", 2)[0]: float(p.rsplit(" ", 2)[1]) for p in parts}


def test_deep_check_plans_optimizer_state_for_trainable_weights_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "full.yaml").write_text(DEEP.replace("CALLBACKS\n", ""))
    (tmp_path / "lora.yaml").write_text(DEEP.replace("CALLBACKS\n", LORA_CALLBACK))
    full = _deep_mib(tmp_path / "full.yaml", capsys)
    lora = _deep_mib(tmp_path / "lora.yaml", capsys)
    # AdamW keeps two float32 moments per trainable weight: the full model's are twice its
    # parameters; LoRA's r=4 adapters are under 3 % of the weights
    assert full["optimizer state"] == pytest.approx(2 * full["parameters"], abs=0.02)
    assert full["gradients"] == full["parameters"]
    assert 0 < lora["optimizer state"] < 0.06 * full["optimizer state"]
    assert 0 < lora["gradients"] < 0.03 * lora["parameters"]
    assert lora["parameters"] >= full["parameters"]
