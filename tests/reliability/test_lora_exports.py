"""LoRA: an adapter-only checkpoint folds only onto its own base and exports as a PEFT adapter;
``alpha: 0`` is refused as ``r: 0`` is."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch
from support.hf_models import LOGITS_ATOL, hf_logits, ids, random_hf_model, save_hf
from support.reliability import run_cli

from plugtrain.testing import trainer_run, write_run_file

LLAMA = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # k_proj and v_proj are half as tall as q_proj (GQA)
    "max_position_embeddings": 32,
    "tie_word_embeddings": False,
}
LORA = {"r": 4, "alpha": 8, "target_modules": ["TransformerDecoderLayer", "Linear"]}


def _loader() -> Any:
    generator = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, 128, (8, 17), generator=generator)
    rows = [
        {"input_ids": t[:-1], "labels": t[1:], "attention_mask": torch.ones(16, dtype=torch.long)}
        for t in tokens
    ]
    return torch.utils.data.DataLoader(rows, batch_size=2)


@pytest.fixture(scope="module")
def adapter_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 3-step adapter-only LoRA fit (every Linear of the layer) on a plugtrain base file."""
    import transformers

    import plugtrain
    from plugtrain.conversion import hf_to_plugtrain
    from plugtrain_models.families import build_decoder
    from plugtrain_models.lora.callback import Lora

    root = tmp_path_factory.mktemp("lora")
    hf = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    folder = save_hf(hf, root / "hf")
    converted = hf_to_plugtrain(folder)
    weights = root / "base.mdl"
    torch.save({"model": converted.state}, weights)
    torch.manual_seed(5)
    trainer = plugtrain.Trainer(
        device="CPU",
        model_dir=root / "run",
        model=build_decoder("llama", converted.model_keys),
        optimizer={"AdamW": {"lr": 0.05}},
        loop={"max_steps": 3},
        checkpoint={"steps": 3},
        callbacks=[Lora(lora_params=[LORA], adapter_only_checkpoints=True)],
        seed=3,
    )
    trainer.fit(_loader(), ckpt_path=str(weights))
    with torch.no_grad():
        logits = trainer.unwrapped_model.eval().logits(ids(128))
    init = {
        "model_dir": str(root / "run"),
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", **converted.model_keys},
        "optimizer": {"AdamW": {"lr": 0.05}},
        "callbacks": [{"Lora": {"lora_params": [LORA], "adapter_only_checkpoints": True}}],
    }
    run = write_run_file(root, trainer_run(init))
    checkpoint = trainer.checkpoint_path(3)
    saved = torch.load(checkpoint, weights_only=True)["model"]
    assert not any(n.endswith(".weight") for n in saved)  # adapters only
    return {"root": root, "folder": folder, "weights": weights, "run": run,
            "checkpoint": checkpoint, "logits": logits, "state": converted.state}  # fmt: skip


def _convert(checkpoint: Path, run: Path, target: str, out: Path):
    return run_cli(
        "checkpoint", "convert", str(checkpoint), "--src-fmt", "plugtrain", "--tgt-fmt", target,
        "--config", str(run), "--output-dir", str(out),
    )  # fmt: skip


def test_x05_folding_an_adapter_only_checkpoint_onto_a_changed_base_is_refused(
    adapter_only: dict[str, Any], tmp_path: Path
) -> None:
    weights = adapter_only["weights"]
    original = weights.read_bytes()
    changed = dict(adapter_only["state"])
    name = next(n for n in changed if n.endswith("proj_q_dense_layer.weight"))
    changed[name] = changed[name] + 1e-3
    try:
        torch.save({"model": changed}, weights)
        done = _convert(adapter_only["checkpoint"], adapter_only["run"], "hf", tmp_path / "a")
    finally:
        weights.write_bytes(original)
    assert done.status == 1, done.err
    assert "trained on other base weights than" in done.err
    assert str(weights) in done.err
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    # the unchanged base folds, with the LoRA model's logits
    done = _convert(adapter_only["checkpoint"], adapter_only["run"], "hf", tmp_path / "b")
    assert done.status == 0, done.err
    (folded,) = (tmp_path / "b").iterdir()
    torch.testing.assert_close(
        hf_logits(folded, ids(128)), adapter_only["logits"], atol=LOGITS_ATOL, rtol=1e-5
    )


def test_x13_an_adapter_only_checkpoint_exports_as_a_peft_adapter(
    adapter_only: dict[str, Any], tmp_path: Path
) -> None:
    import peft
    import transformers

    done = _convert(adapter_only["checkpoint"], adapter_only["run"], "hf-peft", tmp_path)
    assert done.status == 0, done.err
    (adapter,) = tmp_path.iterdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = transformers.AutoModelForCausalLM.from_pretrained(
            adapter_only["folder"], attn_implementation="eager"
        )
        model = peft.PeftModel.from_pretrained(base, adapter).eval()
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters()
               if "lora_A" in n}  # fmt: skip
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                       "down_proj"}  # fmt: skip
    torch.testing.assert_close(
        hf_logits(model, ids(128)), adapter_only["logits"], atol=LOGITS_ATOL, rtol=1e-5
    )


def test_x12_lora_alpha_0_is_refused_as_r_0_is(tmp_path: Path) -> None:
    init = {
        "backend": {"backend_type": "CPU"},
        "model": {"name": "llama", "vocab_size": 64, "hidden_size": 32, "num_heads": 4,
                  "num_hidden_layers": 1, "filter_size": 48, "max_position_embeddings": 32},
        "optimizer": {"AdamW": {"lr": 0.01}},
        "loop": {"max_steps": 2},
        "callbacks": [{"Lora": {"lora_params": {"r": 4, "alpha": 0}}}],
    }  # fmt: skip
    run = write_run_file(
        tmp_path, trainer_run(init, fit={"train_dataloader": {"Synthetic": {"batch_size": 2}}})
    )
    done = run_cli("check", str(run))
    assert done.status == 2, done.err
    assert "alpha must not be 0" in done.err
    assert "nothing would train" in done.err
    text = run.read_text().replace("alpha: 0", "alpha: 0.5")
    run.write_text(text)
    assert run_cli("check", str(run)).status == 0
