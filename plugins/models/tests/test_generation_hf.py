"""Greedy generation equals transformers' ``generate(do_sample=False)``, every family it has.

Each family: a tiny transformers model with every weight N(0, 0.2) (norm weights + 1, so that
logits are sharp and greedy choices are not near-ties), saved as a Hugging Face folder, read
into plugtrain's decoder by the converters (``hf_to_plugtrain``), then both generate 16 tokens
greedily from two prompts (ours as one left-padded batch, theirs one prompt at a time).
The windowed families' prompts plus outputs are longer than their windows. Also the command:
``plugtrain generate RUN.yaml --ckpt HF_FOLDER --json`` with the folder's own tokenizer.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from plugtrain.cli import main
from plugtrain.conversion import hf_to_plugtrain
from plugtrain.testing import trainer_run, write_run_file
from plugtrain_models.families import build_decoder
from plugtrain_models.generation import generate

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

V, H, L, NH, P = 96, 64, 2, 4, 64
NEW_TOKENS = 16
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [3, 4, 50]]
TOKENIZER = Path(__file__).parent / "data" / "tiny_tokenizer"
LLAMA = {
    "vocab_size": V,
    "hidden_size": H,
    "intermediate_size": 96,
    "num_hidden_layers": L,
    "num_attention_heads": NH,
    "num_key_value_heads": 2,
    "max_position_embeddings": P,
    "tie_word_embeddings": False,
}
GPT2 = {"vocab_size": V, "n_embd": H, "n_layer": L, "n_head": NH, "n_positions": P, "n_inner": 128}
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {**GPT2, "activation_function": "gelu_new"}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", LLAMA),
    "mistral": ("MistralConfig", "MistralForCausalLM", {**LLAMA, "sliding_window": 8}),
    "mixtral": (
        "MixtralConfig", "MixtralForCausalLM",
        {**LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "gemma2": (
        "Gemma2Config", "Gemma2ForCausalLM",
        {**LLAMA, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 8,
         "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
         "tie_word_embeddings": True},
    ),
    "falcon": (
        "FalconConfig", "FalconForCausalLM",
        {"vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
         "new_decoder_architecture": True, "num_kv_heads": 2, "parallel_attn": True,
         "bias": False, "alibi": False, "max_position_embeddings": P},
    ),
    "gptj": (
        "GPTJConfig", "GPTJForCausalLM",
        {"vocab_size": V, "n_embd": H, "n_layer": L, "n_head": NH, "rotary_dim": 8,
         "n_inner": 96, "n_positions": P, "tie_word_embeddings": False},
    ),
    "gpt-neox": (
        "GPTNeoXConfig", "GPTNeoXForCausalLM",
        {"vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": NH,
         "intermediate_size": 96, "max_position_embeddings": P, "rotary_pct": 0.5,
         "use_parallel_residual": True},
    ),
    "bloom": ("BloomConfig", "BloomForCausalLM", {"vocab_size": V, "hidden_size": H,
                                                  "n_layer": L, "n_head": NH}),
    "gpt_bigcode": (
        "GPTBigCodeConfig", "GPTBigCodeForCausalLM", {**GPT2, "multi_query": True}
    ),
}  # fmt: skip


def _hf_folder(family: str, folder: Path) -> Any:
    """A tiny transformers model of ``family`` with sharp random weights, saved in ``folder``."""
    config_name, model_name, config = FAMILIES[family]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config_class = getattr(transformers, config_name)
        model = getattr(transformers, model_name)(config_class(**config)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0.0, 0.2)
            if name.endswith("weight") and parameter.ndim == 1:  # norm weights
                parameter.add_(1.0)
    model.save_pretrained(folder)
    return model


def _theirs(model: Any, prompt: list[int]) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
        eos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    return [int(i) for i in out[0, len(prompt) :]]


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_ids_equal_transformers_generate(family: str, tmp_path: Path) -> None:
    reference = _hf_folder(family, tmp_path)
    converted = hf_to_plugtrain(tmp_path)
    ours = build_decoder(converted.model_name, converted.model_keys)
    ours.load_state_dict(converted.state)
    generated = generate(ours, PROMPTS, NEW_TOKENS)
    assert generated == [_theirs(reference, prompt) for prompt in PROMPTS]


def _run_file(tmp_path: Path, model_keys: dict[str, Any], name: str) -> Path:
    init = {
        "backend": {"backend_type": "CPU"},
        "model_dir": str(tmp_path / "model_dir"),
        "seed": 1,  # the same untrained weights in every command
        "model": {"name": name, **model_keys},
    }
    validate_all = {"val_dataloaders": [], "ckpt_paths": None}
    return write_run_file(tmp_path, trainer_run(init, validate_all=validate_all))


def test_the_generate_command_prints_json_with_the_checkpoints_tokenizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "hf"
    _, model_name, config = FAMILIES["llama"]
    config = {**config, "vocab_size": 320, "bos_token_id": 0, "eos_token_id": 1}
    FAMILIES["llama-320"] = ("LlamaConfig", model_name, config)
    try:
        reference = _hf_folder("llama-320", folder)
    finally:
        del FAMILIES["llama-320"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, folder)
    converted = hf_to_plugtrain(folder)
    run_file = _run_file(tmp_path, converted.model_keys, converted.model_name)
    prompts = ["The cat sat on the", "Paris is"]
    command = ["generate", str(run_file), "--ckpt", str(folder), "--max-tokens", "6", "--json"]
    assert main([*command, "--prompt", *prompts]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    assert [set(line) for line in lines] == [{"prompt", "token_ids", "text"}] * 2
    for line, prompt in zip(lines, prompts, strict=True):
        encoded = tokenizer(prompt)["input_ids"]  # with the tokenizer's BOS, as ours
        expected = reference.generate(
            torch.tensor([encoded]), max_new_tokens=6, do_sample=False, eos_token_id=1,
            pad_token_id=2,
        )[0, len(encoded) :].tolist()  # fmt: skip
        assert line["prompt"] == prompt
        assert line["token_ids"] == expected
        assert line["text"] == tokenizer.decode(expected, skip_special_tokens=True)


def test_the_generate_command_is_reproducible_under_a_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = {"vocab_size": 300, "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1,
            "max_position_embeddings": 64, "filter_size": 64}  # fmt: skip
    run_file = _run_file(tmp_path, keys, "gpt2")
    command = ["generate", str(run_file), "--prompt", "hello", "--temperature", "2.0", "--json",
               "--max-tokens", "12"]  # fmt: skip
    outputs = []
    for seed in ("3", "3", "4"):
        assert main([*command, "--seed", seed]) == 0
        outputs.append(json.loads(capsys.readouterr().out)["token_ids"])
    assert outputs[0] == outputs[1] != outputs[2]


def test_without_a_tokenizer_folder_generate_uses_the_one_the_data_was_written_with(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "text.txt"
    text.write_text("The cat sat on the mat.\nParis is the capital of France.\n" * 8)
    data = tmp_path / "data"
    written = ["preprocess", str(text), "-o", str(data), "--tokenizer", str(TOKENIZER),
               "--max-seq-length", "16"]  # fmt: skip
    assert main(written) == 0
    capsys.readouterr()
    keys = {"vocab_size": 320, "hidden_size": 32, "num_heads": 2, "num_hidden_layers": 1,
            "max_position_embeddings": 64, "filter_size": 64}  # fmt: skip
    run_file = _run_file(tmp_path, keys, "gpt2")
    run = yaml.safe_load(run_file.read_text())
    loader = {"data_processor": "GptHDF5MapDataProcessor", "data_dir": str(data),
              "batch_size": 2}  # fmt: skip
    run["trainer"]["validate_all"] = {"val_dataloaders": [loader], "ckpt_paths": None}
    run_file.write_text(yaml.safe_dump(run))
    prompt = "The cat sat on the"
    assert main(["generate", str(run_file), "--prompt", prompt, "--max-tokens", "5",
                 "--json"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "byte tokenizer" not in captured.err
    line = json.loads(captured.out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(TOKENIZER)
    assert line["text"] == tokenizer.decode(line["token_ids"], skip_special_tokens=True)
    assert len(line["token_ids"]) <= 5
