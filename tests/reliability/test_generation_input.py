"""``generate`` and ``lm_eval``: a tokenizer folder's code never runs, a checkpoint folder's
``config.json`` must describe the run file's model, and every number flag is range-checked."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from support.hf_models import random_hf_model, save_hf
from support.paths import REPO
from support.reliability import run_cli

from plugtrain.testing import trainer_run, write_run_file

TOKENIZER = REPO / "plugins" / "models" / "tests" / "data" / "tiny_tokenizer"
LLAMA = {
    "vocab_size": 320,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face Llama folder with the tiny tokenizer's files."""
    import transformers

    folder = tmp_path_factory.mktemp("hf") / "llama"
    model = random_hf_model(transformers.LlamaConfig, transformers.LlamaForCausalLM, **LLAMA)
    save_hf(model, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, folder)
    return folder


def _run_file(folder: Path, checkpoint: Path, **changes: Any) -> Path:
    from plugtrain.conversion import hf_to_plugtrain

    converted = hf_to_plugtrain(checkpoint)
    model = {"name": converted.model_name, **converted.model_keys, **changes}
    init = {
        "backend": {"backend_type": "CPU"},
        "model_dir": str(folder / "model_dir"),
        "seed": 1,
        "model": model,
    }
    validate_all = {"val_dataloaders": [], "ckpt_paths": None}
    return write_run_file(folder, trainer_run(init, validate_all=validate_all))


def test_x03_a_tokenizer_folder_naming_its_own_code_is_refused_and_never_run(
    checkpoint: Path, tmp_path: Path, keep_registry: None
) -> None:
    folder = tmp_path / "tok"
    shutil.copytree(TOKENIZER, folder)
    marker = tmp_path / "ran"
    (folder / "tokenization_evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    )
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]}
    config["tokenizer_class"] = "EvilTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    run_file = _run_file(tmp_path, checkpoint)
    done = run_cli("generate", str(run_file), "--tokenizer", str(folder), "--prompt", "Paris")
    assert done.status == 1, done.err
    assert "'auto_map' names Python code" in done.err
    assert "never runs a folder's code" in done.err
    assert "trust_remote_code" not in done.err
    assert not marker.exists()
    # the same folder without auto_map is read from its tokenizer.json, as preprocessing does
    del config["auto_map"], config["tokenizer_class"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    done = run_cli("generate", str(run_file), "--tokenizer", str(folder), "--prompt", "Paris",
                   "--max-tokens", "3", "--json")  # fmt: skip
    assert done.status == 0, done.err
    assert len(json.loads(done.out)["token_ids"]) <= 3
    assert not marker.exists()


def test_x03_the_lm_eval_tokenizer_is_the_same_safe_loader(tmp_path: Path) -> None:
    from plugtrain_models.evaluation.harness import EleutherEvalHarness
    from plugtrain_models.generation.text import load_text_tokenizer

    folder = tmp_path / "tok"
    shutil.copytree(TOKENIZER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "auto_map": {}}))
    with pytest.raises(Exception, match="'auto_map' names Python code"):
        load_text_tokenizer(folder)
    harness = EleutherEvalHarness.__new__(EleutherEvalHarness)
    harness.tokenizer_dir, harness.tokenizer_file_path = str(folder), None
    with pytest.raises(Exception, match="'auto_map' names Python code"):
        harness.tokenizer()


def test_x06_generate_refuses_a_checkpoint_whose_config_disagrees_with_the_run_file(
    checkpoint: Path, tmp_path: Path, keep_registry: None
) -> None:
    run_file = _run_file(tmp_path, checkpoint, rope_theta=500000.0)
    done = run_cli("generate", str(run_file), "--ckpt", str(checkpoint), "--prompt", "Paris")
    assert done.status == 2, done.err  # a usage error, as check says it
    assert "rope_theta: config.json has 10000.0, the model 500000.0" in done.err
    assert "Traceback" not in done.err


@pytest.mark.parametrize(
    ("command", "flag", "value", "words"),
    [
        ("generate", "--max-tokens", "0", "must be > 0, got 0"),
        ("generate", "--max-tokens", "-3", "must be > 0, got -3"),
        ("generate", "--top-k", "0", "must be > 0, got 0"),
        ("generate", "--top-p", "1.5", "must be <= 1, got 1.5"),
        ("generate", "--temperature", "nan", "must be a finite number, got 'nan'"),
        ("lm_eval", "--num_fewshot", "-1", "must be >= 0, got -1"),
        ("lm_eval", "--limit", "-2", "must be > 0, got -2"),
        ("lm_eval", "--limit", "0", "must be > 0, got 0"),
        ("lm_eval", "--batch_size", "0", "must be > 0, got 0"),
    ],
)
def test_x15_out_of_range_flags_are_a_usage_error(
    command: str, flag: str, value: str, words: str, tmp_path: Path
) -> None:
    run_file = tmp_path / "run.yaml"
    run_file.write_text("trainer: {}\n")
    extra = ["--prompt", "x"] if command == "generate" else ["--tasks", "winogrande"]
    with pytest.raises(SystemExit) as stopped:
        run_cli(command, str(run_file), *extra, f"{flag}={value}")
    assert stopped.value.code == 2


def test_x15_the_message_names_the_flag_and_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    from plugtrain.cli import main

    with pytest.raises(SystemExit):
        main(["generate", "run.yaml", "--prompt", "x", "--max-tokens=0"])
    assert "argument --max-tokens: must be > 0, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["lm_eval", "run.yaml", "--num_fewshot=-1"])
    assert "argument --num-fewshot/--num_fewshot: must be >= 0, got -1" in capsys.readouterr().err


def test_x15_the_run_files_max_tokens_has_the_same_range(
    checkpoint: Path, tmp_path: Path, keep_registry: None
) -> None:
    run_file = _run_file(tmp_path, checkpoint, max_tokens=0)
    done = run_cli("check", str(run_file))
    assert done.status == 2, done.err
    assert "max_tokens: must be > 0, got 0" in done.err


def test_x03_the_safe_loader_renders_chats_and_encodes_as_transformers(tmp_path: Path) -> None:
    import transformers

    from plugtrain_models.generation.text import load_text_tokenizer

    folder = tmp_path / "tok"
    shutil.copytree(TOKENIZER, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{{ bos_token }}{% for m in messages %}{{ '<' + m['role'] + '> ' + m['content'] }}"
        "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<assistant> ' }}{% endif %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours = load_text_tokenizer(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)  # the oracle, in the test only
    chat = [{"role": "user", "content": "Where is Paris?"}, {"role": "assistant", "content": "In"}]
    for options in ({"add_generation_prompt": True}, {"continue_final_message": True}):
        messages = chat[:1] if "add_generation_prompt" in options else chat
        expected = theirs.apply_chat_template(messages, tokenize=False, **options)
        assert ours.hf.apply_chat_template(messages, tokenize=False, **options) == expected
    for text in ("The cat sat on the mat.", "Paris is"):
        assert ours.encode(text) == theirs(text)["input_ids"]
        assert ours.encode(text, False) == theirs(text, add_special_tokens=False)["input_ids"]
    assert ours.eos_id == theirs.eos_token_id
    assert ours.hf.bos_token_id == theirs.bos_token_id
