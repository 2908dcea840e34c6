"""A Model Zoo run file with a ``Lora`` callback, from the command line, as a user runs it.

A tiny Llama saved by transformers is the base (``ckpt_path`` names its folder); ``plugtrain
fit`` trains LoRA adapters on preprocessed text, a second ``fit`` with more steps resumes from
the newest checkpoint, and ``plugtrain checkpoint convert`` exports it folded (transformers) and
as a PEFT adapter; both give the LoRA model's logits.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

import peft
import transformers
from support.hf_models import LOGITS_ATOL, hf_logits, ids, random_hf_model, save_hf
from support.plugtrain_cli import run_plugtrain

from plugtrain.conversion import hf_to_plugtrain
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import apply_lora
from plugtrain_models.lora.config import lora_configs

pytestmark = pytest.mark.slow  # five command-line runs

LLAMA = {
    "vocab_size": 320, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}  # fmt: skip
LORA = [
    {"r": 8, "alpha": 16, "target_modules": ["MultiQueryAttention", "Linear"]},
    {"r": 4, "alpha": 4, "target_modules": ["*.ffn.ffn.1.linear_layer"]},
]


def _ok(result: object) -> None:
    assert result.returncode == 0, result.stderr + result.stdout  # type: ignore[attr-defined]


def _run_file(tmp_path: Path, folder: Path | None, keys: dict[str, object], steps: int) -> Path:
    init = {
        "backend": {"backend_type": "CPU"},
        "model_dir": "model",
        "seed": 1,
        "model": {"name": "llama", **keys},
        "optimizer": {"AdamW": {"learning_rate": 0.01}},
        "loop": {"max_steps": steps},
        "checkpoint": {"steps": 2},
        "callbacks": [{"Lora": {"lora_params": LORA}}],
    }
    fit = {
        **({"ckpt_path": str(folder)} if folder is not None else {}),
        "train_dataloader": {
            "data_processor": "GptHDF5MapDataProcessor",
            "data_dir": "train_data",
            "batch_size": 2,
            "shuffle": False,
            "num_workers": 0,
        },
    }
    return write_run_file(tmp_path, trainer_run(init, fit=fit))


def test_a_run_file_trains_resumes_and_exports_folded_and_as_peft(tmp_path: Path) -> None:
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    folder = save_hf(hf, tmp_path / "llama_hf")
    keys = dict(hf_to_plugtrain(folder).model_keys)
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps." * 3 for i in range(40)))
    _ok(
        run_plugtrain(
            "preprocess", text, "-o", "train_data", "--max-seq-length", "32", cwd=tmp_path
        )
    )

    first = run_plugtrain("fit", _run_file(tmp_path, folder, keys, 4), cwd=tmp_path)
    _ok(first)
    assert "the checkpoint holds no adapters: its weights are the base" in first.stderr
    assert "parameters (" in first.stderr
    assert " train);" in first.stderr
    # the resume: ckpt_path unset, so the newest checkpoint of model_dir loads (Model Zoo's rule)
    again = run_plugtrain("fit", _run_file(tmp_path, None, keys, 6), cwd=tmp_path)
    _ok(again)
    assert "checkpoint_4.mdl at step 4" in again.stderr  # its own checkpoint, not the folder
    assert "converted the Hugging Face" not in again.stderr
    checkpoint = tmp_path / "model" / "checkpoint_6.mdl"
    run = tmp_path / "run.yaml"
    convert = ["checkpoint", "convert", checkpoint, "--src-fmt", "plugtrain", "--config", run]
    _ok(run_plugtrain(*convert, "--tgt-fmt", "hf", cwd=tmp_path))
    _ok(run_plugtrain(*convert, "--tgt-fmt", "hf-peft", cwd=tmp_path))

    model = build_decoder("llama", keys)
    apply_lora(model, lora_configs(LORA))
    model.load_state_dict(torch.load(checkpoint, weights_only=True)["model"])
    with torch.no_grad():
        expected = model.eval().logits(ids(320))
    folded = hf_logits(tmp_path / "model" / "checkpoint_6_to_hf", ids(320))
    torch.testing.assert_close(folded, expected, atol=LOGITS_ATOL, rtol=1e-5)
    adapter = tmp_path / "model" / "checkpoint_6_to_hf-peft"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 8
    assert config["rank_pattern"] == {
        f"model.layers.{i}.mlp.down_proj": 4 for i in range(2)
    }  # the second group's layers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = transformers.AutoModelForCausalLM.from_pretrained(
            folder, attn_implementation="eager"
        )
        adapted = peft.PeftModel.from_pretrained(base, adapter).eval()
    torch.testing.assert_close(hf_logits(adapted, ids(320)), expected, atol=LOGITS_ATOL, rtol=1e-5)
