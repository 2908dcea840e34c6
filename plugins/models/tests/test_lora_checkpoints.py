"""LoRA checkpoints and exports: exact resume (whole and adapter-only), a base loaded as it is,
the folded Hugging Face export and the PEFT adapter, each against the LoRA model's logits."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("transformers")
pytest.importorskip("peft")

import peft
import transformers
from support.hf_models import LOGITS_ATOL, hf_logits, ids, random_hf_model, save_hf

import plugtrain
from plugtrain.cli import main as plugtrain_main
from plugtrain.conversion import hf_to_plugtrain
from plugtrain.errors import CheckpointMismatchError
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.families import build_decoder
from plugtrain_models.lora.apply import is_adapter
from plugtrain_models.lora.callback import Lora

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}
LORA = {
    "r": 4,
    "alpha": 8,
    "dropout": 0.1,  # dropout draws: an exact resume must restore the generator too
    "target_modules": ["TransformerDecoderLayer", "Linear"],
}
EMBEDDING_LORA = {"r": 2, "alpha": 3, "target_modules": ["EmbeddingLayer"]}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny tied Llama saved by transformers, and its weights as a plugtrain checkpoint."""
    root = tmp_path_factory.mktemp("lora")
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    folder = save_hf(hf, root / "hf")
    converted = hf_to_plugtrain(folder)
    weights = root / "base.mdl"
    torch.save({"model": converted.state}, weights)
    return {"hf": hf, "folder": folder, "converted": converted, "weights": weights, "root": root}


def _loader() -> torch.utils.data.DataLoader[Any]:
    generator = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 128, (16, 17), generator=generator)
    rows = [
        {"input_ids": t[:-1], "labels": t[1:], "attention_mask": torch.ones(16, dtype=torch.long)}
        for t in tokens
    ]
    return torch.utils.data.DataLoader(rows, batch_size=2)


def _trainer(
    base: dict[str, Any], model_dir: Path, steps: int, groups: Any = None, **lora: Any
) -> plugtrain.Trainer:
    torch.manual_seed(5)
    model = build_decoder("llama", base["converted"].model_keys)
    return plugtrain.Trainer(
        device="CPU",
        model_dir=model_dir,
        model=model,
        optimizer={"AdamW": {"lr": 0.01, "weight_decay": 0.1}},
        loop={"max_steps": steps},
        checkpoint={"steps": 3},
        callbacks=[Lora(lora_params=groups or [LORA, EMBEDDING_LORA], **lora)],
        seed=3,
    )


def _adapters(trainer: plugtrain.Trainer) -> dict[str, torch.Tensor]:
    return {n: t.clone() for n, t in trainer.unwrapped_model.state_dict().items() if is_adapter(n)}


@pytest.mark.parametrize("adapter_only", [False, True], ids=["whole", "adapter-only"])
def test_an_interrupted_fit_resumes_bit_exactly(
    base: dict[str, Any], tmp_path: Path, adapter_only: bool
) -> None:
    straight = _trainer(base, tmp_path / "straight", 6, adapter_only_checkpoints=adapter_only)
    straight.fit(_loader(), ckpt_path=str(base["weights"]))
    first = _trainer(base, tmp_path / "interrupted", 3, adapter_only_checkpoints=adapter_only)
    first.fit(_loader(), ckpt_path=str(base["weights"]))
    checkpoint = first.checkpoint_path(3)
    saved = torch.load(checkpoint, weights_only=True)
    adapters = {n for n in saved["model"] if is_adapter(n)}
    if adapter_only:
        assert set(saved["model"]) == adapters  # the adapters only ...
        lora = next(e["state"] for e in saved["callbacks"] if e and e["name"] == "Lora")
        assert lora["base"]["path"] == str(base["weights"].resolve())  # ... and their base
        assert len(lora["base"]["fingerprint"]) == 64
        whole = torch.load(base["weights"], weights_only=True)
        assert whole_size(saved) < whole_size(whole) / 5
    optimizer_params = saved["optimizer"]["state"]
    assert len(optimizer_params) == len(adapters)  # optimizer state of the adapters only
    resumed = _trainer(base, tmp_path / "interrupted", 6, adapter_only_checkpoints=adapter_only)
    resumed.fit(_loader())  # autoloads checkpoint 3
    assert resumed.loaded_step == 3
    expected, got = _adapters(straight), _adapters(resumed)
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    state = resumed.unwrapped_model.state_dict()
    for name, tensor in base["converted"].state.items():
        assert torch.equal(state[name], tensor), name


def whole_size(state: dict[str, Any]) -> int:
    """Bytes of the model tensors of a checkpoint state."""
    return sum(t.numel() * t.element_size() for t in state["model"].values())


def test_an_adapter_only_fit_from_a_hugging_face_folder_resumes_reading_it_again(
    base: dict[str, Any], tmp_path: Path
) -> None:
    first = _trainer(base, tmp_path / "run", 3, adapter_only_checkpoints=True)
    first.fit(_loader(), ckpt_path=str(base["folder"]))
    saved = torch.load(first.checkpoint_path(3), weights_only=True)
    lora = next(e["state"] for e in saved["callbacks"] if e and e["name"] == "Lora")
    assert lora["base"]["path"] == str(base["folder"].resolve())
    resumed = _trainer(base, tmp_path / "run", 4, adapter_only_checkpoints=True)
    resumed.fit(_loader())
    assert resumed.loaded_step == 3
    assert resumed.global_step == 4
    state = resumed.unwrapped_model.state_dict()
    for name, tensor in base["converted"].state.items():
        assert torch.equal(state[name], tensor), name


def test_an_adapter_only_checkpoint_refuses_another_base(
    base: dict[str, Any], tmp_path: Path
) -> None:
    first = _trainer(base, tmp_path / "run", 3, adapter_only_checkpoints=True)
    first.fit(_loader(), ckpt_path=str(base["weights"]))
    changed = {k: v.clone() for k, v in base["converted"].state.items()}
    changed["model.ln_f.weight"] += 1e-3
    torch.save({"model": changed}, base["weights"].parent / "other.mdl")
    checkpoint = torch.load(first.checkpoint_path(3), weights_only=True)
    for entry in checkpoint["callbacks"]:
        if entry and entry["name"] == "Lora":
            entry["state"]["base"]["path"] = str(base["weights"].parent / "other.mdl")
    moved = tmp_path / "moved.mdl"
    torch.save(checkpoint, moved)
    again = _trainer(base, tmp_path / "again", 6, adapter_only_checkpoints=True)
    with pytest.raises(CheckpointMismatchError, match="trained on other base weights than"):
        again.fit(_loader(), ckpt_path=str(moved))


def test_an_adapter_only_checkpoint_without_its_base_reference_says_so(
    base: dict[str, Any], tmp_path: Path
) -> None:
    first = _trainer(base, tmp_path / "run", 3, adapter_only_checkpoints=True)
    first.fit(_loader(), ckpt_path=str(base["weights"]))
    stripped = torch.load(first.checkpoint_path(3), weights_only=True)
    del stripped["callbacks"]  # the Lora callback's state holds the reference
    torch.save(stripped, first.checkpoint_path(3))
    torch.manual_seed(5)
    evaluator = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "eval",
        model=build_decoder("llama", base["converted"].model_keys),
        callbacks=[Lora(lora_params=[LORA, EMBEDDING_LORA], adapter_only_checkpoints=True)],
    )
    with pytest.raises(CheckpointMismatchError, match="adapters without their base weights"):
        evaluator.validate([], ckpt_path=str(first.checkpoint_path(3)))


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "not-strict"])
def test_a_hugging_face_base_loads_into_a_lora_model_as_it_is(
    base: dict[str, Any], tmp_path: Path, strict: bool
) -> None:
    torch.manual_seed(5)
    model = build_decoder("llama", base["converted"].model_keys)
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "run",
        model=model,
        optimizer={"AdamW": {"lr": 0.01}},
        loop={"max_steps": 1},
        checkpoint={"disable_strict_checkpoint_loading": not strict},
        callbacks=[Lora(lora_params=LORA)],
        seed=3,
    )
    fresh = _adapters(trainer)
    trainer.load_checkpoint(base["folder"])
    assert trainer.global_step == 0
    state = model.state_dict()
    for name, tensor in base["converted"].state.items():
        assert torch.equal(state[name], tensor), name
    assert all(torch.equal(state[n], t) for n, t in fresh.items())  # the adapters are new


def _run_file(base: dict[str, Any], folder: Path, lora: Any) -> Path:
    keys = dict(base["converted"].model_keys)
    init = {
        "model_dir": str(folder),
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", **keys},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 3},
        "checkpoint": {"steps": 3},
        "callbacks": [{"Lora": {"lora_params": lora}}],
    }
    return write_run_file(folder, trainer_run(init))


@pytest.fixture(scope="module")
def trained(base: dict[str, Any]) -> dict[str, Any]:
    """A 3-step LoRA fit of the tied Llama (embedding and every Linear of the layers)."""
    folder = base["root"] / "trained"
    trainer = _trainer(base, folder, 3, groups=[{**LORA, "dropout": 0.0}, EMBEDDING_LORA])
    trainer.fit(_loader(), ckpt_path=str(base["weights"]))
    model = trainer.unwrapped_model.eval()
    with torch.no_grad():
        logits = model.logits(ids())
    run = _run_file(base, folder, [{**LORA, "dropout": 0.0}, EMBEDDING_LORA])
    return {"checkpoint": trainer.checkpoint_path(3), "logits": logits, "run": run}


def test_the_folded_export_gives_the_lora_models_logits(
    trained: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = trained["checkpoint"]
    status = plugtrain_main([
        "checkpoint", "convert", str(checkpoint), "--src-fmt", "plugtrain", "--tgt-fmt", "hf",
        "--config", str(trained["run"]),
    ])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    exported = checkpoint.parent / f"{checkpoint.name.removesuffix('.mdl')}_to_hf"
    config = (exported / "config.json").read_text()
    assert '"tie_word_embeddings": false' in config  # the adapted table and the head untie
    # the same float32 function, with W + BA * s summed once instead of applied apart
    torch.testing.assert_close(
        hf_logits(exported, ids()), trained["logits"], atol=LOGITS_ATOL, rtol=1e-5
    )


def test_the_peft_export_loads_in_peft_with_the_lora_models_logits(
    base: dict[str, Any], trained: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = trained["checkpoint"]
    status = plugtrain_main([
        "checkpoint", "convert", str(checkpoint), "--src-fmt", "plugtrain",
        "--tgt-fmt", "hf-peft", "--config", str(trained["run"]),
    ])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    adapter = checkpoint.parent / f"{checkpoint.name.removesuffix('.mdl')}_to_hf-peft"
    assert sorted(p.name for p in adapter.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_base = transformers.AutoModelForCausalLM.from_pretrained(
            base["folder"], attn_implementation="eager"
        )
        model = peft.PeftModel.from_pretrained(hf_base, adapter).eval()
    loaded = sum(1 for n, _ in model.named_parameters() if "lora_" in n)
    assert loaded == 2 * (7 * 2 + 1)  # q, k, v, o and the three MLP layers of 2 layers; table
    torch.testing.assert_close(
        hf_logits(model, ids()), trained["logits"], atol=LOGITS_ATOL, rtol=1e-5
    )


def test_gpt2_folds_through_its_fused_attention_and_refuses_a_peft_adapter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from plugtrain_models.lora.apply import apply_lora
    from plugtrain_models.lora.config import lora_configs
    from plugtrain_models.lora.layers import lora_layers

    sizes = {"vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}
    hf = random_hf_model(transformers.GPT2Config, transformers.GPT2LMHeadModel, **sizes)
    converted = hf_to_plugtrain(save_hf(hf, tmp_path / "gpt2"))
    model = build_decoder("gpt2", converted.model_keys)
    model.load_state_dict(converted.state)
    group = {"r": 4, "alpha": 6, "target_modules": ["MultiheadAttention", "Linear"]}
    apply_lora(model, lora_configs(group))
    for layer in lora_layers(model).values():
        with torch.no_grad():
            layer.lora_B.normal_(0, 0.2, generator=torch.Generator().manual_seed(3))
    checkpoint = tmp_path / "lora.mdl"
    torch.save({"model": model.state_dict()}, checkpoint)  # no recorded scaling: the run file's
    with torch.no_grad():
        expected = model.eval().logits(ids())
    run = tmp_path / "run.yaml"
    callbacks = [{"Lora": {"lora_params": group}}]
    run.write_text(
        yaml.safe_dump(
            {"trainer": {"init": {"model": {"name": "gpt2", **converted.model_keys},
                                  "callbacks": callbacks}}}
        )
    )  # fmt: skip
    convert = ["checkpoint", "convert", str(checkpoint), "--src-fmt", "plugtrain"]
    assert plugtrain_main([*convert, "--tgt-fmt", "hf", "--config", str(run)]) == 0
    exported = tmp_path / "lora_to_hf"
    torch.testing.assert_close(hf_logits(exported, ids()), expected, atol=LOGITS_ATOL, rtol=1e-5)
    capsys.readouterr()
    assert plugtrain_main([*convert, "--tgt-fmt", "hf-peft", "--config", str(run)]) != 0
    error = capsys.readouterr().err
    assert "is transformed on export to Hugging Face (fused or reshaped)" in error
    assert "--tgt-fmt hf (folded)" in error
