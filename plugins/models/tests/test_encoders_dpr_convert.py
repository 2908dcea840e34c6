"""Converter ``dpr``: a folder with ``question_encoder/`` and ``ctx_encoder/`` both ways.

Tiny random ``DPRQuestionEncoder`` and ``DPRContextEncoder`` saved with ``save_pretrained`` into
the two sub-folders convert to a ``dpr`` section whose model gives their pooled outputs; the
export writes the same two folders, every tensor bit-equal, each loadable by ``from_pretrained``.
"""

from __future__ import annotations

import json
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
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "layer_norm_eps": 1e-12,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "projection_dim": 0,
}
PARTS = ("question_encoder", "ctx_encoder")


@pytest.fixture(scope="module")
def dpr(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    folder = tmp_path_factory.mktemp("hf") / "dpr"
    models = {
        "question_encoder": random_hf_model(
            transformers.DPRConfig, transformers.DPRQuestionEncoder, **CONFIG
        ),
        "ctx_encoder": random_hf_model(
            transformers.DPRConfig, transformers.DPRContextEncoder, **CONFIG
        ),
    }
    with torch.no_grad():  # two different encoders (both drew the same values from seed 0)
        for parameter in models["ctx_encoder"].parameters():
            parameter.mul_(-1.0 if parameter.ndim > 1 else 1.0)
    for part, model in models.items():
        save_hf(model, folder / part)
    return models, folder


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        found.update(safetensors_torch.load_file(file))
    return found


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    q_mask = torch.ones(2, 12, dtype=torch.long)
    q_mask[1, 9:] = 0
    c_mask = torch.ones(2, 2, 12, dtype=torch.long)
    c_mask[0, 1, 6:] = 0
    return {
        "questions_input_ids": torch.randint(1, 96, (2, 12), generator=generator) * q_mask,
        "questions_attention_mask": q_mask,
        "questions_token_type_ids": torch.zeros(2, 12, dtype=torch.long),
        "ctx_input_ids": torch.randint(1, 96, (2, 2, 12), generator=generator) * c_mask,
        "ctx_attention_mask": c_mask,
        "ctx_token_type_ids": torch.zeros(2, 2, 12, dtype=torch.long),
    }


def pooled(models: dict[str, Any], b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        q = models["question_encoder"](
            input_ids=b["questions_input_ids"], attention_mask=b["questions_attention_mask"],
            token_type_ids=b["questions_token_type_ids"],
        ).pooler_output  # fmt: skip
        ctx = models["ctx_encoder"](
            input_ids=b["ctx_input_ids"].view(-1, 12),
            attention_mask=b["ctx_attention_mask"].view(-1, 12),
            token_type_ids=b["ctx_token_type_ids"].view(-1, 12),
        ).pooler_output
    return q, ctx


def test_hf_dpr_converts_to_a_dpr_section_with_its_outputs(dpr: tuple[Any, Path]) -> None:
    models, folder = dpr
    converted = hf_to_plugtrain(folder, "dpr", config=folder / "question_encoder/config.json")
    assert converted.model_name == "dpr"
    keys = converted.model_keys
    assert keys["q_encoder"] == keys["ctx_encoder"]
    assert keys["q_encoder"]["layer_norm_epsilon"] == 1e-12
    model = get_registry().resolve("model", "dpr")(**keys).eval()
    model.load_state_dict(converted.state)
    b = batch()
    with torch.no_grad():
        ours = model.logits(b)
    q, ctx = pooled(models, b)
    torch.testing.assert_close(ours["q_embeddings"], q, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours["ctx_embeddings"], ctx, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours["q2c_scores"], q @ ctx.T, atol=1e-4, rtol=1e-5)


def test_dpr_round_trip_writes_both_folders_bit_equal(
    dpr: tuple[Any, Path], tmp_path: Path
) -> None:
    models, folder = dpr
    converted = hf_to_plugtrain(folder, "dpr")  # the config: the first sub-folder's
    exported = export_hf(converted.state, "dpr", converted.model_keys, tmp_path / "out")
    for part, architecture in zip(PARTS, ("DPRQuestionEncoder", "DPRContextEncoder"), strict=True):
        original, back = tensors(folder / part), tensors(exported / part)
        assert set(back) == set(original), part
        for name, tensor in original.items():
            assert back[name].dtype == tensor.dtype, name
            assert torch.equal(back[name], tensor), name
        config = json.loads((exported / part / "config.json").read_text())
        assert config["architectures"] == [architecture]
        assert config["hidden_size"] == 32
    loaded = {
        "question_encoder": transformers.DPRQuestionEncoder.from_pretrained(
            exported / "question_encoder", attn_implementation="eager"
        ).eval(),
        "ctx_encoder": transformers.DPRContextEncoder.from_pretrained(
            exported / "ctx_encoder", attn_implementation="eager"
        ).eval(),
    }
    for got, expected in zip(pooled(loaded, batch()), pooled(models, batch()), strict=True):
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_dpr_sections_that_differ_do_not_export(dpr: tuple[Any, Path], tmp_path: Path) -> None:
    _, folder = dpr
    converted = hf_to_plugtrain(folder, "dpr")
    keys = json.loads(json.dumps(converted.model_keys))
    keys["ctx_encoder"]["layer_norm_epsilon"] = 1e-5
    with pytest.raises(ConversionError, match=r"share one config\.json"):
        export_hf(converted.state, "dpr", keys, tmp_path / "out")


@pytest.mark.slow
def test_dpr_checkpoint_convert_on_the_command_line(dpr: tuple[Any, Path], tmp_path: Path) -> None:
    _, folder = dpr
    out = tmp_path / "plugtrain"
    command = ["checkpoint", "convert", str(folder), "--model", "dpr", "--src-fmt", "hf",
               "--tgt-fmt", "plugtrain", "--config", str(folder / "question_encoder/config.json"),
               "--output-dir", str(out)]  # fmt: skip
    assert main(command) == 0
    (section_file,) = out.glob("*_to_plugtrain.yaml")
    assert yaml.safe_load(section_file.read_text())["model"]["name"] == "dpr"
    (checkpoint,) = out.glob("*_to_plugtrain.mdl")
    back = ["checkpoint", "convert", str(checkpoint), "--model", "dpr", "--src-fmt", "plugtrain",
            "--tgt-fmt", "hf", "--config", str(section_file), "--output-dir", str(out)]  # fmt: skip
    assert main(back) == 0
    (exported,) = (p for p in out.iterdir() if p.is_dir() and p.name.endswith("_to_hf"))
    for part in PARTS:
        original = tensors(folder / part)
        assert all(torch.equal(tensors(exported / part)[k], v) for k, v in original.items())
