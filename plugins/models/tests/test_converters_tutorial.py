"""Model Zoo's fine-tuning tutorial, end to end on a CPU, from the command line.

A tiny Llama with the tutorial's layout (grouped-query attention, rope_theta 500000, SwiGLU,
RMSNorm) is saved as transformers saves a sharded ``.bin`` checkpoint; the tutorial's own
``model_config.yaml`` runs with only the sizes, the backend and the data made CPU-sized:
convert, check, fit from the converted file, export to Hugging Face, load with transformers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import transformers
from support.hf_models import hf_logits, random_hf_model
from support.plugtrain_cli import run_plugtrain

from plugtrain.testing import write_run_file

pytestmark = pytest.mark.slow

HF_CONFIG = {
    "vocab_size": 320,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
}

# The tutorial's model_config.yaml (Model Zoo 2.10) with CPU sizes: what a user edits.
CPU_SIZES = {
    "hidden_size": 64,
    "num_heads": 4,
    "num_hidden_layers": 2,
    "filter_size": 96,
    "vocab_size": 320,
    "max_position_embeddings": 64,
    "rotary_dim": 16,
    "extra_attention_params": {"num_kv_groups": 2},
}
TUTORIAL = """\
trainer:
  init:
    model_dir: finetuning_tutorial/model
    backend:
      backend_type: CPU
    callbacks:
    - ComputeNorm: {}
    checkpoint:
      steps: 4
    logging:
      log_steps: 1
    loop:
      eval_steps: 2
      max_steps: 4
    model:
      name: "llama"
      attention_dropout_rate: 0.0
      attention_module: multiquery_attention
      attention_type: scaled_dot_product
      dropout_rate: 0.0
      embedding_dropout_rate: 0.0
      embedding_layer_norm: false
      extra_attention_params:
        num_kv_groups: 8
      filter_size: 14336
      hidden_size: 4096
      initializer_range: 0.02
      layer_norm_epsilon: 1.0e-05
      loss_scaling: num_tokens
      loss_weight: 1.0
      max_position_embeddings: 8192
      nonlinearity: swiglu
      norm_type: rmsnorm
      num_heads: 32
      num_hidden_layers: 32
      pos_scaling_factor: 1.0
      position_embedding_type: rotary
      rope_theta: 500000.0
      rotary_dim: 128
      share_embedding_weights: false
      use_bias_in_output: false
      use_ffn_bias: false
      use_ffn_bias_in_attention: false
      use_projection_bias_in_attention: false
      vocab_size: 128256
    optimizer:
      AdamW:
        betas:
        - 0.9
        - 0.95
        correct_bias: true
        weight_decay: 0.01
    schedulers:
    - CosineDecayLR:
        end_learning_rate: 1.0e-05
        initial_learning_rate: 5.0e-05
        total_iters: 4
    seed: 1
  fit:
    train_dataloader:
      batch_size: 2
      data_dir: train_data
      data_processor: GptHDF5MapDataProcessor
      num_workers: 0
      shuffle: true
      shuffle_seed: 1337
    val_dataloader: &id001
      batch_size: 1
      data_dir: valid_data
      data_processor: GptHDF5MapDataProcessor
      num_workers: 0
      shuffle: false
    ckpt_path: finetuning_tutorial/from_hf/pytorch_model_to_plugtrain.mdl
  validate:
    val_dataloader: *id001
  validate_all:
    val_dataloaders: *id001
"""


def _save_sharded_bin(model: torch.nn.Module, folder: Path) -> Path:
    """The layout of a sharded ``pytorch_model.bin`` checkpoint, two shards and their index."""
    folder.mkdir(parents=True)
    state = model.state_dict()
    names = list(state)
    halves = {
        "pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
        "pytorch_model-00002-of-00002.bin": names[len(names) // 2 :],
    }
    weight_map = {}
    for shard, keys in halves.items():
        torch.save({k: state[k].clone() for k in keys}, folder / shard)
        weight_map.update(dict.fromkeys(keys, shard))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    model.config.to_json_file(folder / "config.json")
    return folder / "pytorch_model.bin.index.json"


def _run_file(tmp_path: Path, ckpt_path: str | None = None, **model: object) -> Path:
    data = yaml.safe_load(TUTORIAL)
    data["trainer"]["init"]["model"].update({**CPU_SIZES, **model})
    if ckpt_path is not None:
        data["trainer"]["fit"]["ckpt_path"] = ckpt_path
    return write_run_file(tmp_path / "model_config.yaml", data)


def _ok(result: object) -> None:
    assert result.returncode == 0, result.stderr + result.stdout  # type: ignore[attr-defined]


def test_the_fine_tuning_tutorial_converts_checks_trains_and_exports(tmp_path: Path) -> None:
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **HF_CONFIG)
    index = _save_sharded_bin(hf, tmp_path / "Meta-Llama-3-tiny")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps." * 3 for i in range(40)))
    for split in ("train_data", "valid_data"):
        _ok(run_plugtrain("preprocess", text, "-o", split, "--max-seq-length", "32", cwd=tmp_path))

    _ok(
        run_plugtrain(
            "checkpoint",
            "convert",
            index,
            "--model",
            "llama",
            "--src-fmt",
            "hf",
            "--tgt-fmt",
            "plugtrain",
            "--config",
            index.parent / "config.json",
            "--output-dir",
            "finetuning_tutorial/from_hf",
            cwd=tmp_path,
        )
    )
    converted = tmp_path / "finetuning_tutorial/from_hf"
    assert sorted(p.name for p in converted.iterdir()) == [
        "config_to_plugtrain.yaml",
        "pytorch_model_to_plugtrain.mdl",
    ]
    section = yaml.safe_load((converted / "config_to_plugtrain.yaml").read_text())["model"]
    assert section["name"] == "llama"
    assert section["rope_theta"] == 500000.0

    # check compares a Hugging Face ckpt_path's config.json with the model, key by key
    folder = tmp_path / "hf"
    hf.save_pretrained(folder)
    _ok(run_plugtrain("check", _run_file(tmp_path, str(folder)), cwd=tmp_path))
    bad = run_plugtrain("check", _run_file(tmp_path, str(folder), rope_theta=1e4), cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr
    assert "model_config.yaml:" in bad.stderr
    assert "rope_theta: " in bad.stderr
    assert "has 500000.0, the model 10000.0" in bad.stderr

    run_file = _run_file(tmp_path)
    _ok(run_plugtrain("check", run_file, cwd=tmp_path))
    fit = run_plugtrain("fit", run_file, cwd=tmp_path)
    _ok(fit)
    assert "at step 0" in fit.stderr
    checkpoint = tmp_path / "finetuning_tutorial/model/checkpoint_4.mdl"
    assert checkpoint.is_file()

    _ok(
        run_plugtrain(
            "checkpoint",
            "convert",
            checkpoint,
            "--model",
            "llama",
            "--src-fmt",
            "plugtrain",
            "--tgt-fmt",
            "hf",
            "--config",
            run_file,
            "--output-dir",
            "export",
            cwd=tmp_path,
        )
    )
    exported = tmp_path / "export/checkpoint_4_to_hf"
    assert (exported / "model.safetensors.index.json").is_file()
    assert json.loads((exported / "config.json").read_text())["rope_theta"] == 500000.0

    from plugtrain.train.checkpointing.storage.archive import load_checkpoint
    from plugtrain_models.families import build_decoder

    keys = dict(yaml.safe_load(TUTORIAL)["trainer"]["init"]["model"])
    keys.update(CPU_SIZES)
    keys.pop("name")
    trained = build_decoder("llama", keys).eval()
    trained.load_state_dict(load_checkpoint(checkpoint)["model"])
    tokens = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = trained.logits(tokens)
    torch.testing.assert_close(hf_logits(exported, tokens), ours, atol=1e-4, rtol=1e-5)
    assert (ours - hf_logits(hf, tokens)).abs().max() > 1e-6  # it trained
