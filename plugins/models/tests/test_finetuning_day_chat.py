"""Chat generation: ``--chat`` and JSONL ``messages`` rendered with the tokenizer's template (one
BOS, as transformers), multi-line prompts, and stops at the checkpoint's EOS ids (a list)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from plugtrain.cli import main as plugtrain_main
from plugtrain.conversion import hf_to_plugtrain
from plugtrain.testing import write_run_file
from plugtrain_models.generation.prompts import checkpoint_eos_ids, encode_prompt, read_prompts
from plugtrain_models.generation.text import load_text_tokenizer

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
hf_models = pytest.importorskip("support.hf_models")

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
SPECIALS = [BOS, EOS, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}"
    "<|end_header_id|>{{ message['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>{% endif %}"
)


def _build_tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer folder that adds BOS to a text, with :data:`TEMPLATE`."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(["The cat sat on the mat. Be nice, cat."] * 5, trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, tokenizer.token_to_id(BOS))]
    )
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS}
    config["chat_template"] = TEMPLATE
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


CHAT = [{"role": "system", "content": "Be nice."}, {"role": "user", "content": "The cat?"}]


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer that adds BOS, with a Llama-3-shaped chat template."""
    return _build_tokenizer(tmp_path_factory.mktemp("tok") / "llama3")


def test_a_chat_is_rendered_and_encoded_as_transformers_does_with_one_bos(
    tokenizer_folder: Path,
) -> None:
    ours = load_text_tokenizer(tokenizer_folder)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tokenizer_folder))
    expected = theirs.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
    assert encode_prompt(ours, CHAT, chat=False) == expected
    bos = theirs.convert_tokens_to_ids(BOS)
    assert expected.count(bos) == 1
    as_user = encode_prompt(ours, "The cat?", chat=True)
    assert as_user == list(
        theirs.apply_chat_template(
            [{"role": "user", "content": "The cat?"}], add_generation_prompt=True, tokenize=True
        )["input_ids"]
    )
    assert encode_prompt(ours, "The cat?", chat=False)[0] == bos  # a plain prompt: its BOS


def test_jsonl_prompts_hold_multi_line_texts_and_chats(tmp_path: Path) -> None:
    file = tmp_path / "prompts.jsonl"
    lines = [{"prompt": "line one\nline two"}, {"messages": CHAT}]
    file.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    assert read_prompts(None, str(file)) == ["line one\nline two", CHAT]
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(Exception, match=r'bad.jsonl:1: give \{"prompt": TEXT\}'):
        read_prompts(None, str(tmp_path / "bad.jsonl"))


def test_the_eos_ids_of_the_checkpoint_folder_are_a_list(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert checkpoint_eos_ids(str(tmp_path)) == [5, 7, 9]
    assert checkpoint_eos_ids(str(tmp_path / "model.safetensors")) == [5, 7, 9]
    assert checkpoint_eos_ids(None) == []


def test_generate_chat_stops_at_the_generation_configs_eos_ids(
    tokenizer_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf = hf_models.random_hf_model(
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        vocab_size=320,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    folder = hf_models.save_hf(hf, tmp_path / "hf")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_folder / name, folder / name)
    every_id = list(range(320))  # whatever it writes first ends it
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": every_id}))
    keys: dict[str, Any] = dict(hf_to_plugtrain(folder).model_keys)
    init = {"model_dir": str(tmp_path / "m"), "model": {"name": "llama", **keys}}
    run = write_run_file(tmp_path, {"trainer": {"init": init}})
    status = plugtrain_main([
        "generate", str(run), "--ckpt", str(folder), "--chat", "--prompt", "The cat?",
        "--max-tokens", "5", "--json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.err
    (line,) = captured.out.splitlines()
    assert len(json.loads(line)["token_ids"]) == 1
