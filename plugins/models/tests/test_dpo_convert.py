"""``plugtrain checkpoint convert --model dpo``: a decoder's Hugging Face folder as DPO's policy
and reference, and DPO's policy back as its family's folder (tiny Llama and GPT-2 folders)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import transformers
from safetensors.torch import load_file
from support.hf_models import (
    LOGITS_ATOL,
    hf_logits,
    ids,
    random_hf_model,
    save_hf,
)

from plugtrain.cli import main
from plugtrain.conversion import ConversionError, export_hf, hf_to_plugtrain
from plugtrain.discovery.loading import get_registry

FAMILIES: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "llama": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        {
            "vocab_size": 128,
            "hidden_size": 64,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 64,
            "tie_word_embeddings": False,
        },
    ),
    "gpt2": (
        transformers.GPT2Config,
        transformers.GPT2LMHeadModel,
        {"vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64},
    ),
}


def _saved(family: str, folder: Path) -> tuple[Any, Path]:
    config_class, model_class, config = FAMILIES[family]
    hf = random_hf_model(config_class, model_class, **config)
    return hf, save_hf(hf, folder / family)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update(load_file(file))
    return found


def _convert(source: Path, config: Path, output: Path, source_format: str) -> list[str]:
    target_format = "plugtrain" if source_format == "hf" else "hf"
    return ["checkpoint", "convert", str(source), "--model", "dpo", "--src-fmt", source_format,
            "--tgt-fmt", target_format, "--config", str(config),
            "--output-dir", str(output)]  # fmt: skip


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_folder_fills_policy_and_reference_and_the_policy_exports_bit_equal(
    family: str, tmp_path: Path
) -> None:
    hf, folder = _saved(family, tmp_path)
    out = tmp_path / "plugtrain"
    assert main(_convert(folder, folder / "config.json", out, "hf")) == 0
    (section_file,) = out.glob("*_to_plugtrain.yaml")
    section = yaml.safe_load(section_file.read_text())["model"]
    assert section["name"] == "dpo"
    assert section["policy_model"]["name"] == family
    assert section["policy_model"]["hidden_size"] == 64
    (checkpoint,) = out.glob("*_to_plugtrain.mdl")
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    keys = {k: v for k, v in section.items() if k != "name"}
    model = get_registry().resolve("model", "dpo")(**keys).eval()
    model.load_state_dict(state)
    assert model.reference is not None
    decoder_state = hf_to_plugtrain(folder, family).state
    tokens = ids()
    expected = hf_logits(hf, tokens)
    for decoder in (model.policy_model, model.reference):
        own = decoder.state_dict()
        assert set(own) == set(decoder_state)
        assert all(torch.equal(own[k], v) for k, v in decoder_state.items())
        with torch.no_grad():
            logits = decoder.logits(tokens)
        torch.testing.assert_close(logits, expected, atol=LOGITS_ATOL, rtol=1e-5)

    assert main(_convert(checkpoint, section_file, out, "plugtrain")) == 0
    (exported,) = (p for p in out.iterdir() if p.is_dir() and p.name.endswith("_to_hf"))
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == family
    written, original = _tensors(exported), _tensors(folder)
    assert set(written) == set(original)
    assert all(torch.equal(written[k], v) for k, v in original.items())


def test_export_writes_the_policy_not_the_reference(tmp_path: Path) -> None:
    _, folder = _saved("llama", tmp_path)
    converted = hf_to_plugtrain(folder, "dpo")
    assert {n.split(".", 1)[0] for n in converted.state} == {"policy_model", "ref_model"}
    state = {
        name: torch.zeros_like(tensor) if name.startswith("ref_model.") else tensor
        for name, tensor in converted.state.items()
    }
    exported = export_hf(state, "dpo", converted.model_keys, tmp_path / "exported")
    written, original = _tensors(exported), _tensors(folder)
    assert all(torch.equal(written[k], v) for k, v in original.items())


def test_a_model_type_without_a_converter_is_refused_by_name(tmp_path: Path) -> None:
    _, folder = _saved("llama", tmp_path)
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    with pytest.raises(ConversionError, match=r"'dpo' converter .* model_type 'mamba'"):
        hf_to_plugtrain(other, "dpo")
    section = {"policy_model": {"name": "no-such-family"}}
    with pytest.raises(ConversionError, match="no converter for model 'no-such-family'"):
        export_hf({}, "dpo", section, tmp_path / "none")


def test_convert_config_writes_the_dpo_section_and_back_the_policy_config(
    tmp_path: Path,
) -> None:
    _, folder = _saved("gpt2", tmp_path)
    out = tmp_path / "configs"
    forward = ["checkpoint", "convert-config", str(folder / "config.json"), "--model", "dpo",
               "--src-fmt", "hf", "--tgt-fmt", "plugtrain", "--output-dir", str(out)]  # fmt: skip
    assert main(forward) == 0
    section_file = out / "config_to_plugtrain.yaml"
    section = yaml.safe_load(section_file.read_text())["model"]
    assert section["name"] == "dpo"
    assert section["dpo"] == {}
    assert section["policy_model"]["name"] == "gpt2"
    assert section["policy_model"]["num_heads"] == 4
    back = ["checkpoint", "convert-config", str(section_file), "--src-fmt", "plugtrain",
            "--tgt-fmt", "hf", "--output-dir", str(out)]  # fmt: skip
    assert main(back) == 0
    config = json.loads((out / "config_to_plugtrain_to_hf.json").read_text())
    original = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "gpt2"
    assert {k: config[k] for k in ("n_embd", "n_head", "n_layer", "vocab_size")} == {
        k: original[k] for k in ("n_embd", "n_head", "n_layer", "vocab_size")
    }
