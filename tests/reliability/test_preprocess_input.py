"""``plugtrain preprocess --config``: a read-hook key no record has, bytes that are not UTF-8
and a prompt that is a number are each named with the file, the line and the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")

from support.paths import REPO
from support.reliability import run_cli

TOKENIZER = REPO / "plugins" / "models" / "tests" / "data" / "tiny_tokenizer"
CONFIG = """\
setup:
  data: {type: local, source: ./data}
  output_dir: ./out
  mode: finetuning
processing:
  huggingface_tokenizer: ./tokenizer
  max_seq_length: 32
  min_sequence_len: 2
  use_ftfy: false
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:\\
    prompt_completion_text_read_hook"
  read_hook_kwargs: {prompt_key: PROMPT_KEY, completion_key: answer}
"""


def _run(folder: Path, lines: list[bytes], prompt_key: str = "question"):
    shutil.copytree(TOKENIZER, folder / "tokenizer")
    (folder / "data").mkdir()
    (folder / "data" / "train.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    config = folder / "pre.yaml"
    config.write_text(CONFIG.replace("PROMPT_KEY", prompt_key), encoding="utf-8")
    return run_cli("preprocess", "--config", str(config))


def _record(question: object, answer: str = "Paris.") -> bytes:
    return json.dumps({"question": question, "answer": answer}).encode()


@pytest.fixture
def inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_x14_a_prompt_key_no_record_has_is_named(inside: Path) -> None:
    done = _run(inside, [_record("Where is the Louvre?")] * 3, prompt_key="prompt")
    assert done.status == 1, done.err
    assert "no sample made" in done.err
    assert "read_hook_kwargs prompt_key 'prompt' is in no record" in done.err
    assert "the records' fields: answer, question" in done.err
    assert not (inside / "out").exists()


def test_x14_bytes_that_are_not_utf8_are_named_with_file_and_line(inside: Path) -> None:
    latin1 = '{"question": "Où est le Louvre?", "answer": "À Paris."}'.encode("latin-1")
    done = _run(inside, [_record("Where?"), latin1])
    assert done.status == 1, done.err
    assert "train.jsonl:2: not UTF-8 text (byte 0xf9 at byte 16 of the line)" in done.err
    assert "UnicodeDecodeError" not in done.err
    assert not (inside / "out").exists()


def test_x14_a_prompt_that_is_a_number_names_the_record_and_the_key(inside: Path) -> None:
    done = _run(inside, [_record("Where?"), _record("Capital?"), _record(42)])
    assert done.status == 1, done.err
    assert "train.jsonl:3: the read hook failed: prompt_key 'question' holds 42 (int)" in done.err
    assert "TypeError" not in done.err
    assert not (inside / "out").exists()
