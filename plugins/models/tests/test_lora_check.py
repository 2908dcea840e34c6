"""``plugtrain check`` of a run file with a ``Lora`` callback: what it refuses, torch-free."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from plugtrain.config import load_plan
from plugtrain.errors import ConfigError
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import adaptable_layers
from plugtrain_models.lora.tree import decoder_layers

SIZES = {
    "vocab_size": 64, "hidden_size": 32, "filter_size": 48, "num_hidden_layers": 2,
    "num_heads": 4, "max_position_embeddings": 32,
}  # fmt: skip
FAMILIES = {
    "llama": {"extra_attention_params": {"num_kv_groups": 2},
              "attention_module": "multiquery_attention"},
    "gpt2": {},
    "mixtral": {"moe": {"num_experts": 3, "top_k": 2, "num_shared_experts": 1}},
    "gptj": {},
    "falcon": {},
}  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_layers_known_from_the_keys_are_the_built_models(family: str) -> None:
    model = build_decoder(family, {**SIZES, **FAMILIES[family]})
    built = {(name, path, tuple(m.weight.shape)) for name, path, m in adaptable_layers(model)}
    assert built == set(decoder_layers(model.settings))


def _run_file(tmp_path: Path, lora: Any, sparsity: Any = None) -> Path:
    init: dict[str, Any] = {
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", **SIZES},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 2},
        "callbacks": [{"Lora": {"lora_params": lora}}],
    }
    if sparsity is not None:
        init["sparsity"] = sparsity
    fit = {"train_dataloader": {"Synthetic": {"batch_size": 2}}}
    return write_run_file(tmp_path, trainer_run(init, fit=fit))


def _refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_plan(str(path))
    return str(caught.value)


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_targets_matching_nothing_are_refused_at_lora_params_listing_what_exists(
    tmp_path: Path,
) -> None:
    path = _run_file(tmp_path, {"r": 4, "target_modules": ["query_proj"]})  # q_proj is PEFT's
    message = _refusal(path)
    assert f"run.yaml:{_line_of(path, 'lora_params') + 1}:" in message  # its value's line
    assert "match no Linear or Embedding layer" in message
    for listed in ("MultiheadAttention", "FeedForwardNetwork", "proj_q_dense_layer", "lm_head"):
        assert listed in message


def test_r_larger_than_a_target_is_refused(tmp_path: Path) -> None:
    path = _run_file(tmp_path, {"r": 40, "target_modules": ["MultiheadAttention", "Linear"]})
    assert "r=40 is larger than the smaller side of" in _refusal(path)


def test_r_0_is_refused_saying_nothing_would_train(tmp_path: Path) -> None:
    message = _refusal(_run_file(tmp_path, {"alpha": 2}))
    assert "r is 0 in every group (Model Zoo's default)" in message
    assert "nothing would train" in message


def test_lora_and_sparsity_on_the_same_weights_are_refused(tmp_path: Path) -> None:
    sparsity = {"algorithm": "Static", "sparsity": 0.5}
    path = _run_file(tmp_path, {"r": 4, "target_modules": ["Linear"]}, sparsity)
    message = _refusal(path)
    assert "sparsity (Static" in message
    assert "also prunes" in message
    apart = {**sparsity, "param_filter": ["*ffn*weight"]}
    path = _run_file(tmp_path, {"r": 4, "target_modules": ["MultiheadAttention"]}, apart)
    load_plan(str(path))  # LoRA on attention, sparsity on the FFN: fine


def test_check_accepts_a_good_file_without_importing_torch(tmp_path: Path) -> None:
    path = _run_file(tmp_path, [{"r": 4, "target_modules": ["*.proj_q_dense_layer"]}])
    script = (
        "import sys; from plugtrain.cli import main; status = main(['check', sys.argv[1]]);"
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(status)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "OK (1 trainer)" in done.stdout
