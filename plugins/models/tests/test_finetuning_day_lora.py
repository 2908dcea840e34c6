"""The fine-tuning day with LoRA from a bfloat16 Hugging Face base: an adapter-only fit
resumes; generate, lm_eval and validate load its checkpoints, whole or adapter-only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("transformers")

import transformers
from support.hf_models import random_hf_model, save_hf

import plugtrain
from plugtrain.conversion import hf_to_plugtrain
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.families import build_decoder
from plugtrain_models.generation.loading import load_run
from plugtrain_models.lora.apply import is_adapter
from plugtrain_models.lora.callback import Lora
from plugtrain_models.lora.checkpoints import base_fingerprint
from plugtrain_models.lora.export import fold_for_export

LLAMA = {
    "vocab_size": 96,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32,
}
LLAMA_KEYS = {
    "vocab_size": 96,
    "hidden_size": 32,
    "filter_size": 48,
    "num_hidden_layers": 2,
    "num_heads": 4,
    "max_position_embeddings": 32,
}
LORA = {"r": 4, "alpha": 8, "target_modules": ["TransformerDecoderLayer", "Linear"]}


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama saved by transformers in bfloat16, as published Llama checkpoints are."""
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    return save_hf(hf.to(torch.bfloat16), tmp_path_factory.mktemp("bf16") / "hf")


def _loader() -> torch.utils.data.DataLoader[Any]:
    generator = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 96, (8, 13), generator=generator)
    rows = [
        {"input_ids": t[:-1], "labels": t[1:], "attention_mask": torch.ones(12, dtype=torch.long)}
        for t in tokens
    ]
    return torch.utils.data.DataLoader(rows, batch_size=2)


def _trainer(
    folder: Path, model_dir: Path, steps: int, *, adapter_only: bool = True
) -> plugtrain.Trainer:
    torch.manual_seed(5)
    model = build_decoder("llama", hf_to_plugtrain(folder).model_keys)
    return plugtrain.Trainer(
        device="CPU",
        model_dir=model_dir,
        model=model,
        optimizer={"AdamW": {"lr": 0.01}},
        loop={"max_steps": steps},
        checkpoint={"steps": 2},
        callbacks=[Lora(lora_params=LORA, adapter_only_checkpoints=adapter_only)],
        seed=3,
    )


def test_the_fingerprint_of_a_bf16_file_is_that_of_the_float32_model_it_fills() -> None:
    weights = {"w": torch.randn(3, 4).to(torch.bfloat16), "steps": torch.arange(3)}
    widened = {"w": weights["w"].float(), "steps": torch.arange(3)}
    assert base_fingerprint(weights) == base_fingerprint(widened)
    changed = {"w": widened["w"] + 1e-2, "steps": torch.arange(3)}
    assert base_fingerprint(changed) != base_fingerprint(widened)


def test_an_adapter_only_fit_from_a_bf16_base_resumes_exactly(
    bf16_folder: Path, tmp_path: Path
) -> None:
    straight = _trainer(bf16_folder, tmp_path / "straight", 4)
    straight.fit(_loader(), ckpt_path=str(bf16_folder))
    first = _trainer(bf16_folder, tmp_path / "run", 2)
    first.fit(_loader(), ckpt_path=str(bf16_folder))
    resumed = _trainer(bf16_folder, tmp_path / "run", 4)
    resumed.fit(_loader(), ckpt_path=str(bf16_folder))  # the same command resumes
    assert resumed.loaded_step == 2
    expected = straight.unwrapped_model.state_dict()
    got = resumed.unwrapped_model.state_dict()
    adapters = [n for n in expected if is_adapter(n)]
    assert adapters
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


def _run_file(folder: Path, model_dir: Path, adapter_only: bool) -> Path:
    keys = dict(hf_to_plugtrain(folder).model_keys)
    lora = {"lora_params": LORA, "adapter_only_checkpoints": adapter_only}
    init = {
        "model_dir": str(model_dir),
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", **keys},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 2},
        "callbacks": [{"Lora": lora}],
    }
    fit = {"train_dataloader": {"Digits": {"batch_size": 2}}}
    run = trainer_run(init, fit=fit)
    return write_run_file(model_dir.parent, run, name=f"run_{adapter_only}.yaml")


@pytest.mark.parametrize("adapter_only", [False, True], ids=["whole", "adapter-only"])
def test_generate_lm_eval_and_validate_load_a_lora_checkpoint(
    bf16_folder: Path, tmp_path: Path, adapter_only: bool
) -> None:
    trained = _trainer(bf16_folder, tmp_path / "run", 2, adapter_only=adapter_only)
    trained.fit(_loader(), ckpt_path=str(bf16_folder))
    checkpoint = trained.checkpoint_path(2)
    tokens = torch.tensor([[1, 5, 9, 33, 70]])
    model = trained.unwrapped_model.eval()
    with torch.no_grad():
        expected = model.logits(tokens)
    run = _run_file(bf16_folder, tmp_path / "run", adapter_only)
    loaded = load_run(str(run), [], str(checkpoint))  # what generate and lm_eval load
    with torch.no_grad():
        got = loaded.model.eval().logits(tokens)
    assert torch.equal(got, expected)
    torch.manual_seed(5)
    evaluator = plugtrain.Trainer(
        device="CPU",
        model_dir=tmp_path / "eval",
        model=build_decoder("llama", hf_to_plugtrain(bf16_folder).model_keys),
        callbacks=[Lora(lora_params=LORA, adapter_only_checkpoints=adapter_only)],
    )
    evaluator.validate(_loader(), ckpt_path=str(checkpoint))
    with torch.no_grad():
        assert torch.equal(evaluator.unwrapped_model.eval().logits(tokens), expected)


def test_peft_module_names_select_the_layers_peft_adapts() -> None:
    from plugtrain_models.lora.apply import apply_lora
    from plugtrain_models.lora.config import lora_configs

    keys = dict(LLAMA_KEYS, nonlinearity="swiglu")
    model = build_decoder("llama", keys)
    targets = ["q_proj", "v_proj", "gate_proj", "down_proj"]
    report = apply_lora(model, lora_configs({"r": 2, "target_modules": targets}))
    suffixes = {".".join(name.split(".")[-2:]) for name in report["layers"]}
    assert suffixes == {
        "self_attn.proj_q_dense_layer",
        "self_attn.proj_v_dense_layer",
        "0.linear_layer_for_glu",
        "1.linear_layer",
    }
    assert len(report["layers"]) == 4 * 2  # two layers


def test_the_base_is_recorded_as_given_and_a_relative_one_resumes(
    bf16_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(bf16_folder, tmp_path / "llama_hf")
    monkeypatch.chdir(tmp_path)
    first = _trainer(Path("llama_hf"), Path("run"), 2)
    first.fit(_loader(), ckpt_path="llama_hf")
    saved = torch.load(first.checkpoint_path(2), weights_only=True)
    lora = next(e["state"] for e in saved["callbacks"] if e and e["name"] == "Lora")
    assert lora["base"]["path"] == "llama_hf"
    resumed = _trainer(Path("llama_hf"), Path("run"), 3)
    resumed.fit(_loader(), ckpt_path="llama_hf")
    assert resumed.loaded_step == 2


def test_a_fit_from_a_folder_whose_config_disagrees_exits_2_as_check(
    bf16_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from plugtrain.cli import main as plugtrain_main

    keys = dict(hf_to_plugtrain(bf16_folder).model_keys, hidden_size=64)  # not the folder's
    init = {
        "model_dir": str(tmp_path / "m"),
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", **keys},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 1},
    }
    fit = {"train_dataloader": {"Digits": {"batch_size": 2}}, "ckpt_path": str(bf16_folder)}
    run = write_run_file(tmp_path, trainer_run(init, fit=fit))
    assert plugtrain_main(["check", str(run)]) == 2
    assert plugtrain_main(["fit", str(run)]) == 2
    assert "hidden_size" in capsys.readouterr().err


@pytest.mark.parametrize("adapter_only", [False, True], ids=["whole", "adapter-only"])
def test_a_merged_export_takes_the_dtype_of_its_bf16_base(
    bf16_folder: Path, tmp_path: Path, adapter_only: bool
) -> None:
    trainer = _trainer(bf16_folder, tmp_path / "run", 2, adapter_only=adapter_only)
    trainer.fit(_loader(), ckpt_path=str(bf16_folder))
    checkpoint = tmp_path / "run" / "checkpoint_2.mdl"
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    keys = hf_to_plugtrain(bf16_folder).model_keys
    folded, _ = fold_for_export(state, {"lora_params": LORA}, "llama", keys, checkpoint)
    assert not any(is_adapter(n) for n in folded)
    dtypes = {t.dtype for t in folded.values() if t.is_floating_point()}
    assert dtypes == {torch.bfloat16}
    layer = next(n.removesuffix(".lora_A") for n in state if n.endswith(".lora_A"))
    merged = folded[layer + ".weight"].float()
    base = hf_to_plugtrain(bf16_folder).state[layer + ".weight"].float()
    assert not torch.equal(merged, base)  # the adapter is folded in


def _llama_with_tokenizer(folder: Path) -> Path:
    """A bf16 Llama folder with a word-level tokenizer and an EOS list, as Llama 3 has."""
    import tokenizers

    vocab = {"<s>": 0, "</s>": 1, "<eot>": 2, **{f"w{i}": i for i in range(3, 96)}}
    config = {**LLAMA, "bos_token_id": 0, "eos_token_id": [1, 2]}
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **config)
    save_hf(hf.to(torch.bfloat16), folder)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<s>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    special = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(special), encoding="utf-8")
    return folder


def _exported(checkpoint: Path, run: Path, output: Path) -> Path:
    from plugtrain.cli import main

    formats = ["--src-fmt", "plugtrain", "--tgt-fmt", "hf", "--config", str(run)]
    assert (
        main(["checkpoint", "convert", str(checkpoint), *formats, "--output-dir", str(output)]) == 0
    )
    return output / f"{checkpoint.stem}_to_hf"


@pytest.mark.parametrize("adapter_only", [False, True], ids=["whole", "adapter-only"])
def test_an_export_keeps_the_tokenizer_and_generation_config_of_its_starting_folder(
    tmp_path: Path, adapter_only: bool
) -> None:
    folder = _llama_with_tokenizer(tmp_path / "llama")
    trainer = _trainer(folder, tmp_path / "run", 2, adapter_only=adapter_only)
    trainer.fit(_loader(), ckpt_path=str(folder))
    run = _run_file(folder, tmp_path / "run", adapter_only)
    exported = _exported(tmp_path / "run" / "checkpoint_2.mdl", run, tmp_path / "out")
    assert (exported / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    config = json.loads((exported / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, [1, 2])
    generation = json.loads((exported / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (0, [1, 2])
    loaded = transformers.AutoTokenizer.from_pretrained(exported)
    assert loaded("w5 w7")["input_ids"] == [5, 7]
    assert transformers.GenerationConfig.from_pretrained(exported).eos_token_id == [1, 2]


def test_without_a_starting_folder_an_export_takes_the_datas_tokenizer(tmp_path: Path) -> None:
    folder = _llama_with_tokenizer(tmp_path / "llama")
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(folder / name, tokenizer / name)
    data = tmp_path / "data"
    data.mkdir()
    params = {"processing": {"huggingface_tokenizer": str(tokenizer)}}
    (data / "data_params.json").write_text(json.dumps(params), encoding="utf-8")
    trainer = _trainer(folder, tmp_path / "run", 2, adapter_only=False)
    trainer.fit(_loader())  # from the model's own weights: no starting folder recorded
    run = _run_file(folder, tmp_path / "run", False)
    text = yaml.safe_load(run.read_text())
    text["trainer"]["fit"]["val_dataloader"] = {"GptHDF5MapDataProcessor": {"data_dir": str(data)}}
    run.write_text(yaml.safe_dump(text))
    exported = _exported(tmp_path / "run" / "checkpoint_2.mdl", run, tmp_path / "out")
    assert (exported / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    config = json.loads((exported / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)  # the tokenizer's
