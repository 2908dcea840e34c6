"""``plugtrain preprocess`` ``mode: dpo`` read back through ``DpoHDF5DataProcessor``.

Prompt/chosen/rejected records (plain, chat-templated, and Model Zoo's chat-list records) are
preprocessed from a config file; the rows read back equal rows computed here by hand from the
tokenizer: the prompt/response boundary (by character offsets), masks on the response tokens
only, padding, and the truncation of long prompts and responses.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from plugtrain.cli import main
from plugtrain_models.dpo.data import dpo_hdf5_loader
from plugtrain_models.dpo.schemas import DPO_FEATURES

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST] ' }}{% else %}"
    "{{ message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)
PAD = 1  # the EOS: the tokenizer has no pad token
RECORDS = [
    {"question": "Is the cat on the mat?", "good": "Yes, the cat sat on the mat.",
     "bad": "No."},
    {"question": "Summaries are short, and the cat sat on the mat?", "good": "They are short.",
     "bad": "The mat is where the cat sat, and summaries are long."},
    {"question": "Empty?", "good": "", "bad": "Something."},  # discarded: nothing chosen
]  # fmt: skip


def _tokenizer(folder: Path) -> tokenizers.Tokenizer:
    pre = tokenizers.pre_tokenizers
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(["The cat sat on the mat.", "Summaries are short."] * 9, trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)]
    )
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tokenizer


def _config(tmp_path: Path, hook: str, msl: int, extra: str = "") -> Path:
    text = f"""\
setup:
  data: {{type: local, source: ./data}}
  output_dir: ./out
  mode: dpo
processing:
  huggingface_tokenizer: ./tokenizer
  max_seq_length: {msl}
  use_ftfy: false
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:{hook}"
  read_hook_kwargs: {{prompt_key: question, chosen_key: good, rejected_key: bad}}
dataset:
  max_prompt_length: 6
{extra}"""
    path = tmp_path / "dpo.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    tokenizer = _tokenizer(tmp_path / "tokenizer")
    (tmp_path / "data").mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in RECORDS)
    (tmp_path / "data" / "pairs.jsonl").write_text(lines, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path, tokenizer


def _by_hand(prompt: list[int], responses: list[list[int]], msl: int) -> list[list[int]]:
    """The six rows, written out from the rules (prompt keeps its last 6 tokens if too long)."""
    if len(prompt) + max(map(len, responses)) > msl + 1:
        prompt = prompt[-6:]
    rows = []
    for response in responses:
        seq = (prompt + response)[: msl + 1]
        n = len(seq) - 1
        pad = [PAD] * (msl - n)
        mask = [0] * (len(prompt) - 1) + [1] * (n - len(prompt) + 1) + [0] * (msl - n)
        rows += [seq[:-1] + pad, mask, seq[1:] + pad]
    return rows


def _read(folder: Path) -> list[list[list[int]]]:
    loader = dpo_hdf5_loader(data_dir=str(folder), batch_size=1, shuffle=False, drop_last=False)
    samples = []
    for batch in loader:
        assert list(batch) == list(DPO_FEATURES)
        samples.append([batch[name][0].tolist() for name in DPO_FEATURES])
    return samples


def _run(config: Path) -> dict[str, Any]:
    assert main(["preprocess", "--config", str(config)]) == 0
    return json.loads(Path("out/data_params.json").read_text())


@pytest.mark.parametrize("msl", [40, 14])
def test_plain_records_give_the_rows_computed_by_hand(workdir: tuple[Path, Any], msl: int) -> None:
    root, tok = workdir
    params = _run(_config(root, "dpo_text_read_hook", msl))
    assert params["features"] == list(DPO_FEATURES)
    assert params["post-process"]["discarded_files"] == 1
    expected = []
    for record in RECORDS[:2]:
        prompt = tok.encode(record["question"]).ids
        responses = [
            [*tok.encode(record[k], add_special_tokens=False).ids, PAD] for k in ("good", "bad")
        ]
        expected.append(_by_hand(prompt, responses, msl))
    got = _read(root / "out")
    assert got == expected
    if msl == 14:  # the long rejected response of record 2 cut the prompt and was cut itself
        prompt = tok.encode(RECORDS[1]["question"]).ids
        assert len(prompt) > 6
        assert got[1][3][:6] == prompt[-6:]
        assert got[1][4][-1] == 1


def _chat_ids(tok: Any, prompt: str, response: str) -> tuple[list[int], list[int]]:
    """Prompt and response ids of the rendered conversation, split at the character offset."""
    head = f"<s>[INST] {prompt} [/INST] "
    encoding = tok.encode(f"{head}{response} </s>", add_special_tokens=False)
    boundary = sum(1 for _, end in encoding.offsets if end <= len(head))
    return encoding.ids[:boundary], encoding.ids[boundary:]


def test_chat_templated_records_split_at_the_response(workdir: tuple[Path, Any]) -> None:
    root, tok = workdir
    _run(_config(root, "dpo_read_hook", 48))
    expected = []
    for record in RECORDS[:2]:
        (prompt, good), (_, bad) = (
            _chat_ids(tok, record["question"], record[k]) for k in ("good", "bad")
        )
        expected.append(_by_hand(prompt, [good, bad], 48))
    got = _read(root / "out")
    assert got == expected
    chosen_labels, chosen_mask = got[0][2], got[0][1]
    scored = [label for label, m in zip(chosen_labels, chosen_mask, strict=True) if m]
    assert scored == _chat_ids(tok, RECORDS[0]["question"], RECORDS[0]["good"])[1]
    assert scored[-1] == 1  # the template's end of turn (EOS) is the response's last token


def test_model_zoos_chat_list_records_read_as_the_strings(workdir: tuple[Path, Any]) -> None:
    root, _ = workdir
    _run(_config(root, "dpo_read_hook", 48))
    strings = _read(root / "out")

    def chat(record: dict[str, str], key: str) -> list[dict[str, str]]:
        user = {"role": "user", "content": record["question"]}
        return [user, {"role": "assistant", "content": record[key]}]

    chats = [{"good": chat(r, "good"), "bad": chat(r, "bad")} for r in RECORDS]
    (root / "data" / "pairs.jsonl").write_text("".join(json.dumps(c) + "\n" for c in chats))
    shutil.rmtree(root / "out")
    _run(_config(root, "dpo_read_hook", 48))
    assert _read(root / "out") == strings


def test_errors_name_the_record(
    workdir: tuple[Path, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root, _ = workdir
    config = _config(root, "dpo_read_hook", 48)
    config.write_text(config.read_text().replace("prompt_key: question, ", ""))
    assert main(["preprocess", "--config", str(config)]) != 0
    error = capsys.readouterr().err
    assert (
        "pairs.jsonl:1: the read hook failed: dpo_read_hook needs read_hook_kwargs prompt_key"
        in error
    )
    assert not (root / "out").exists()
    config = _config(root, "dpo_read_hook", 48, "  use_vsl: 3\n")
    assert main(["preprocess", "--config", str(config)]) != 0
    assert "dataset.use_vsl: must be" in capsys.readouterr().err
