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
