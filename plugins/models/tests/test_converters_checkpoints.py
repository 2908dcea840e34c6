"""Hugging Face checkpoints as a run starts from them: every input layout, dtypes, ckpt_path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import transformers
from support.hf_models import hf_logits, ids, random_hf_model, save_hf

import plugtrain
from plugtrain.conversion import export_hf, hf_to_plugtrain
from plugtrain.errors import CheckpointError, CheckpointMismatchError
from plugtrain_models.families import build_decoder

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    return hf, save_hf(hf, tmp_path_factory.mktemp("hf") / "llama")


def test_sharded_bin_and_single_file_inputs_give_the_same_checkpoint(
    llama: tuple[Any, Path], tmp_path: Path
) -> None:
    hf, single = llama
    sharded = save_hf(hf, tmp_path / "sharded", max_shard_size="20KB")
    assert len(list(sharded.glob("model-*.safetensors"))) > 2
    binary = tmp_path / "bin"
    binary.mkdir()
    torch.save(hf.state_dict(), binary / "pytorch_model.bin")
    (binary / "config.json").write_text((single / "config.json").read_text())
    reference = hf_to_plugtrain(single).state
    for source in (sharded / "model.safetensors.index.json", binary / "pytorch_model.bin"):
        state = hf_to_plugtrain(source).state
        assert state.keys() == reference.keys()
        assert all(torch.equal(state[k], reference[k]) for k in reference), source


def test_bfloat16_stays_bfloat16_both_ways(llama: tuple[Any, Path], tmp_path: Path) -> None:
    hf, _ = llama
    folder = save_hf(copy.deepcopy(hf).to(torch.bfloat16), tmp_path / "bf16")
    converted = hf_to_plugtrain(folder)
    assert {t.dtype for t in converted.state.values()} == {torch.bfloat16}
    exported = export_hf(converted.state, "llama", converted.model_keys, tmp_path / "out")
    config = json.loads((exported / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    again = hf_to_plugtrain(exported).state
    assert all(torch.equal(again[k], v) for k, v in converted.state.items())


def test_a_shard_small_enough_splits_the_export_and_from_pretrained_reads_it(
    llama: tuple[Any, Path], tmp_path: Path
) -> None:
    hf, folder = llama
    converted = hf_to_plugtrain(folder)
    out = export_hf(
        converted.state, "llama", converted.model_keys, tmp_path / "out", shard_size="30KB"
    )
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2
    assert shards[-1].endswith(f"-of-{len(shards):05d}.safetensors")
    tokens = ids()
    torch.testing.assert_close(hf_logits(out, tokens), hf_logits(hf, tokens))


def _loader(tokens: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    batch = {
        "input_ids": tokens[:, :-1],
        "labels": tokens[:, 1:],
        "attention_mask": torch.ones_like(tokens[:, 1:]),
    }
    return [batch, batch]


class _FirstLoss:
    """Records the loss of each training step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        self.losses.append(float(metrics["loss"]))


def test_a_fit_from_a_hugging_face_folder_starts_at_step_0_with_transformers_loss(
    llama: tuple[Any, Path], tmp_path: Path
) -> None:
    hf, folder = llama
    converted = hf_to_plugtrain(folder)
    torch.manual_seed(5)
    model = build_decoder("llama", converted.model_keys)  # random weights until the load
    recorder = _FirstLoss()
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "model",
        model=model,
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.01),
        loop={"max_steps": 2},
        logging={"log_steps": 1},
        callbacks=[recorder],
    )
    tokens = torch.randint(0, 128, (2, 17), generator=torch.Generator().manual_seed(3))
    trainer.fit(_loader(tokens), ckpt_path=str(folder))
    with torch.no_grad():
        expected = hf(tokens, labels=tokens).loss  # transformers shifts the labels itself
    # the same float32 function of the same weights: equal to rounding (~1e-7 relative)
    assert recorder.losses[0] == pytest.approx(float(expected), rel=1e-5)
    assert trainer.global_step == 2


def test_a_mismatched_config_key_is_refused_naming_it(
    llama: tuple[Any, Path], tmp_path: Path
) -> None:
    _, folder = llama
    converted = hf_to_plugtrain(folder)
    for key, value in (("rope_theta", 1e6), ("layer_norm_epsilon", 1e-6)):
        model = build_decoder("llama", {**converted.model_keys, key: value})
        trainer = plugtrain.Trainer(device="CPU", model_dir=tmp_path / key, model=model)
        with pytest.raises(CheckpointMismatchError, match=rf"{key}: config.json has"):
            trainer.validate([], ckpt_path=str(folder))


def test_a_weights_only_checkpoint_starts_a_fit_and_a_hf_file_is_named(
    llama: tuple[Any, Path], tmp_path: Path
) -> None:
    from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint

    _, folder = llama
    converted = hf_to_plugtrain(folder)
    unprefixed = {k.removeprefix("model."): v for k, v in converted.state.items()}
    unprefixed["transformer_decoder.norm.weight"] = unprefixed.pop("ln_f.weight")
    weights = save_checkpoint(tmp_path / "weights.mdl", {"model": unprefixed})
    model = build_decoder("llama", converted.model_keys)
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "model",
        model=model,
        optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=0.0),
        loop={"max_steps": 1},
    )
    tokens = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(4))
    trainer.fit(_loader(tokens), ckpt_path=str(weights))  # Model Zoo's names load strictly
    assert trainer.global_step == 1
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in converted.state.items())
    with pytest.raises(CheckpointError, match="is a Hugging Face weights file"):
        load_checkpoint(folder / "model.safetensors")
