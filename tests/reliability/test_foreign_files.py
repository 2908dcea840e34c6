"""Files a checkpoint folder names: shards only from inside it, a malformed index named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("safetensors")
pytest.importorskip("transformers")

from support.hf_models import random_hf_model, save_hf
from support.reliability import run_cli

LLAMA = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama saved in three shards with its index."""
    import transformers

    folder = tmp_path_factory.mktemp("hf") / "llama"
    model = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    return save_hf(model, folder, max_shard_size="20KB")


def _copy_with_index(source: Path, target: Path, change) -> Path:
    target.mkdir()
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    index_file = target / "model.safetensors.index.json"
    index = json.loads(index_file.read_text())
    index_file.write_text(json.dumps(change(index)))
    return target


def _convert(folder: Path, out: Path):
    return run_cli(
        "checkpoint", "convert", str(folder), "--model", "llama", "--config",
        str(folder / "config.json"), "--src-fmt", "hf", "--tgt-fmt", "plugtrain",
        "--output-dir", str(out),
    )  # fmt: skip


def test_x02_a_shard_named_outside_the_index_folder_is_refused(sharded, tmp_path):
    outside = tmp_path / "secret.safetensors"
    first = sorted(sharded.glob("model-*.safetensors"))[0]
    outside.write_bytes(first.read_bytes())
    for shard in ("../secret.safetensors", str(outside), "sub/../../secret.safetensors"):

        def redirect(index, shard=shard):
            name = next(iter(index["weight_map"]))
            index["weight_map"][name] = shard
            return index

        folder = _copy_with_index(sharded, tmp_path / f"c{len(shard)}", redirect)
        done = _convert(folder, tmp_path / f"out{len(shard)}")
        assert done.status == 1, done.err
        assert "not a file name inside the index's folder" in done.err, done.err
        assert repr(shard) in done.err
        assert "internal error" not in done.err
        assert not (tmp_path / f"out{len(shard)}").exists()  # refused before writing


def test_x08_a_malformed_index_names_the_file_and_the_entry(sharded, tmp_path):
    cases = {
        "list": (lambda index: {**index, "weight_map": list(index["weight_map"])}, "is a list"),
        "none": (lambda index: {"metadata": {}}, "'weight_map' is missing"),
        "number": (
            lambda index: {**index, "weight_map": {**index["weight_map"], "x.weight": 7}},
            "weight_map entry 'x.weight' is 7, not a shard file name",
        ),
        "top": (lambda index: [1, 2], "'weight_map' is missing"),
    }
    for label, (change, words) in cases.items():
        folder = _copy_with_index(sharded, tmp_path / label, change)
        done = _convert(folder, tmp_path / f"out-{label}")
        assert done.status == 1, done.err
        assert "internal error" not in done.err
        assert "Traceback" not in done.err
        assert "model.safetensors.index.json" in done.err
        assert words in done.err, done.err
