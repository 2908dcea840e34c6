"""Converters ``t5`` and ``transformer``: Hugging Face T5 (its own RMS norm) both ways.

A tiny random ``T5ForConditionalGeneration`` saved with ``save_pretrained`` converts to a
``t5`` section with ``norm_type: rmsnorm``; the model built from it with the converted state
gives transformers' logits (T5's RMS norm is plugtrain's), and the export gives back every
tensor of the original file bit-equal. Nothing is downloaded.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from support.hf_models import random_hf_model, save_hf

from plugtrain import get_registry
from plugtrain.cli import main
from plugtrain.conversion import ConversionError, export_hf, hf_to_plugtrain

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

CONFIG: dict[str, Any] = {
    "vocab_size": 96,
    "d_model": 32,
    "d_kv": 8,
    "num_heads": 4,
    "d_ff": 64,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "dropout_rate": 0.0,
    "layer_norm_epsilon": 1e-6,
    "feed_forward_proj": "relu",
    "decoder_start_token_id": 0,
    "pad_token_id": 0,
}


@pytest.fixture(scope="module")
def t5(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    hf = random_hf_model(transformers.T5Config, transformers.T5ForConditionalGeneration, **CONFIG)
    return hf, save_hf(hf, tmp_path_factory.mktemp("hf") / "t5")


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a folder's safetensors files."""
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update(safetensors_torch.load_file(file))
    return found


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    return {
        "input_ids": torch.randint(1, 96, (2, 16), generator=generator) * mask,
        "attention_mask": mask,
        "decoder_input_ids": torch.randint(0, 96, (2, 10), generator=generator),
    }


def logits_of(hf: Any, b: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return hf(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"],
            decoder_input_ids=b["decoder_input_ids"],
        ).logits  # fmt: skip


def test_hf_t5_converts_to_an_rmsnorm_section_with_its_outputs(t5: tuple[Any, Path]) -> None:
    hf, folder = t5
    converted = hf_to_plugtrain(folder)
    assert converted.model_name == "t5"
    keys = converted.model_keys
    assert (keys["norm_type"], keys["extra_ids"], keys["src_vocab_size"]) == ("rmsnorm", 0, 96)
    assert keys["share_embedding_weights"] is True
    model = get_registry().resolve("model", "t5")(**keys).eval()
    model.load_state_dict(converted.state)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)["logits"]
    torch.testing.assert_close(ours, logits_of(hf, b), atol=1e-4, rtol=1e-5)


def test_t5_round_trip_gives_every_tensor_back_bit_equal(
    t5: tuple[Any, Path], tmp_path: Path
) -> None:
    hf, folder = t5
    converted = hf_to_plugtrain(folder)
    exported = export_hf(converted.state, "t5", converted.model_keys, tmp_path / "out")
    original, back = tensors(folder), tensors(exported)
    assert set(back) == set(original)
    for name, tensor in original.items():
        assert back[name].dtype == tensor.dtype, name
        assert torch.equal(back[name], tensor), name
    config = json.loads((exported / "config.json").read_text())
    for key in ("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_decoder_layers"):
        assert config[key] == CONFIG[key], key
    assert config["feed_forward_proj"] == "relu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = transformers.T5ForConditionalGeneration.from_pretrained(
            exported, attn_implementation="eager"
        ).eval()
    b = batch()
    torch.testing.assert_close(logits_of(loaded, b), logits_of(hf, b), atol=0, rtol=0)


def test_t5_section_with_extra_ids_exports_the_whole_vocabulary(tmp_path: Path) -> None:
    keys = {
        "src_vocab_size": 90, "extra_ids": 6, "d_model": 32, "d_kv": 8, "num_heads": 4,
        "d_ff": 64, "encoder_num_hidden_layers": 2, "norm_type": "rmsnorm",
    }  # fmt: skip
    model = get_registry().resolve("model", "t5")(**keys)
    exported = export_hf(model.state_dict(), "t5", keys, tmp_path / "out")
    assert json.loads((exported / "config.json").read_text())["vocab_size"] == 96
    assert tensors(exported)["shared.weight"].shape == (96, 32)


def test_a_layernorm_section_does_not_export(tmp_path: Path) -> None:
    keys = {"d_model": 32, "d_kv": 8, "num_heads": 4, "d_ff": 64, "norm_type": "layernorm",
            "encoder_num_hidden_layers": 1, "src_vocab_size": 64}  # fmt: skip
    model = get_registry().resolve("model", "t5")(**keys)
    with pytest.raises(ConversionError, match="norm_type is 'layernorm'"):
        export_hf(model.state_dict(), "t5", keys, tmp_path / "out")


@pytest.mark.slow
def test_checkpoint_convert_both_ways_on_the_command_line(
    t5: tuple[Any, Path], tmp_path: Path
) -> None:
    _, folder = t5
    out = tmp_path / "plugtrain"
    command = ["checkpoint", "convert", str(folder), "--model", "t5", "--src-fmt", "hf",
               "--tgt-fmt", "plugtrain", "--config", str(folder / "config.json"),
               "--output-dir", str(out)]  # fmt: skip
    assert main(command) == 0
    (section_file,) = out.glob("*_to_plugtrain.yaml")
    section = yaml.safe_load(section_file.read_text())["model"]
    assert (section["name"], section["norm_type"]) == ("t5", "rmsnorm")
    (checkpoint,) = out.glob("*_to_plugtrain.mdl")
    back = ["checkpoint", "convert", str(checkpoint), "--model", "t5", "--src-fmt", "plugtrain",
            "--tgt-fmt", "hf", "--config", str(section_file), "--output-dir", str(out)]  # fmt: skip
    assert main(back) == 0
    (exported,) = (p for p in out.iterdir() if p.is_dir() and p.name.endswith("_to_hf"))
    original = tensors(folder)
    assert all(torch.equal(tensors(exported)[k], v) for k, v in original.items())


def test_transformer_converter_reads_t5_into_a_transformer_section(t5: tuple[Any, Path]) -> None:
    hf, folder = t5
    converted = hf_to_plugtrain(folder, "transformer")
    assert converted.model_name == "transformer"
    model = get_registry().resolve("model", "transformer")(**converted.model_keys).eval()
    model.load_state_dict(converted.state)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)["logits"]
    torch.testing.assert_close(ours, logits_of(hf, b), atol=1e-4, rtol=1e-5)


def test_gated_gelu_is_refused_naming_the_key(t5: tuple[Any, Path], tmp_path: Path) -> None:
    _, folder = t5
    config = json.loads((folder / "config.json").read_text())
    config["feed_forward_proj"] = "gated-gelu"
    other = tmp_path / "config.json"
    other.write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="feed_forward_proj = 'gated-gelu'"):
        hf_to_plugtrain(folder, "t5", config=other)


@pytest.mark.parametrize(
    ("projection", "activation"), [("gated-relu", "reglu"), ("gated-silu", "swiglu")]
)
def test_gated_t5_converts_with_model_zoo_s_glu(
    projection: str, activation: str, tmp_path: Path
) -> None:
    config = {**CONFIG, "feed_forward_proj": projection}
    hf = random_hf_model(transformers.T5Config, transformers.T5ForConditionalGeneration, **config)
    folder = save_hf(hf, tmp_path / "t5")
    converted = hf_to_plugtrain(folder)
    assert converted.model_keys["encoder_nonlinearity"] == activation
    model = get_registry().resolve("model", "t5")(**converted.model_keys).eval()
    model.load_state_dict(converted.state)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)["logits"]
    torch.testing.assert_close(ours, logits_of(hf, b), atol=1e-4, rtol=1e-5)
    exported = export_hf(converted.state, "t5", converted.model_keys, tmp_path / "out")
    original = tensors(folder)
    assert all(torch.equal(tensors(exported)[k], v) for k, v in original.items())
