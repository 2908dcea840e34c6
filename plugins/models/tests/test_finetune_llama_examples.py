"""The shipped Llama fine-tuning examples, run as docs/fine-tuning.md shows them: a tiny Llama
folder written by transformers, ``from_config`` taking the model's shape from it, check and a
2-step fit, full and LoRA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("transformers")

import transformers
from support.hf_models import random_hf_model, save_hf
from support.tiny_models import TINY_LLAMA_SHAPE

from plugtrain.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with ./llama3_hf and runs/data/stdlib_gpt, the examples' working folder."""
    hf = random_hf_model(
        transformers.LlamaConfig, transformers.LlamaForCausalLM, **TINY_LLAMA_SHAPE
    )
    save_hf(hf, tmp_path / "llama3_hf")
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"line {i}: the quick brown fox jumps." * 4 for i in range(40)))
    monkeypatch.chdir(tmp_path)
    data = ["preprocess", str(text), "-o", "runs/data/stdlib_gpt", "--max-seq-length", "128"]
    assert main(data) == 0
    return tmp_path


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_the_llama_fine_tuning_examples_check_and_fit(
    kind: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = EXAMPLES / f"finetune_llama_{kind}.yaml"
    assert main(["check", str(example)]) == 0
    assert main(["fit", str(example), "--set", "trainer.init.loop.max_steps=2"]) == 0
    out = capsys.readouterr()
    assert "converted the Hugging Face checkpoint" in out.out + out.err
    checkpoint = workdir / f"runs/finetune_llama_{kind}/checkpoint_2.mdl"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    adapters = [n for n in saved if "lora_" in n]
    if kind == "lora":
        assert adapters
        assert all("lora_" in n for n in saved)
    else:
        assert not adapters
        hidden = saved["model.embedding_layer.word_embeddings.weight"].shape
        assert hidden == (257, 32)  # the shape came from the folder's config.json
    formats = ["--src-fmt", "plugtrain", "--tgt-fmt", "hf", "--config", str(example)]
    assert main(["checkpoint", "convert", str(checkpoint), *formats, "--output-dir", "out"]) == 0
    exported = transformers.AutoConfig.from_pretrained(workdir / "out/checkpoint_2_to_hf")
    assert (exported.num_hidden_layers, exported.num_key_value_heads) == (2, 2)


def test_fit_help_points_at_the_guide_and_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for named in ("docs/fine-tuning.md", "finetune_llama_full.yaml", "finetune_llama_lora.yaml"):
        assert named in shown
        assert (EXAMPLES.parent / named).is_file() or (EXAMPLES / named).is_file()


def test_keys_beside_from_config_override_it_and_are_checked_at_their_line(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = yaml.safe_load((EXAMPLES / "finetune_llama_full.yaml").read_text())
    model = run["trainer"]["init"]["model"]
    model["num_hidden_layers"] = 0
    (workdir / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    assert main(["check", "run.yaml"]) == 2
    err = capsys.readouterr().err
    line = (workdir / "run.yaml").read_text().splitlines().index("      num_hidden_layers: 0") + 1
    assert f"run.yaml:{line}:" in err
    assert "num_hidden_layers" in err
    model["num_hidden_layers"] = 1
    del run["trainer"]["fit"]["ckpt_path"]
    (workdir / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    assert main(["fit", "run.yaml", "--set", "trainer.init.loop.max_steps=1"]) == 0
    saved = torch.load(workdir / "runs/finetune_llama_full/checkpoint_1.mdl", weights_only=True)
    layers = {n.split(".")[3] for n in saved["model"] if ".layers." in n}
    assert layers == {"0"}  # one layer, as written beside from_config
    model["from_config"] = "./missing"
    (workdir / "run.yaml").write_text(yaml.safe_dump(run, sort_keys=False))
    assert main(["check", "run.yaml"]) == 2
    assert (
        "trainer.init.model.llama.from_config: missing: cannot read the Hugging Face config"
        in capsys.readouterr().err
    )
