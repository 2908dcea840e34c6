"""``plugtrain preprocess --config``: Model Zoo's preprocessing files run as written.

Local copies of Model Zoo's ``summarization_preprocessing.yaml`` and
``multi_turn_dialogue_preprocessing.yaml`` (``tests/data/``; only the data source and the
tokenizer point to local folders) run from a working directory holding those folders, and their
output trains. Errors name the file, line and column; a failed run leaves no folder behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from plugtrain.cli import main

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("ftfy")  # Model Zoo's files keep use_ftfy: True

DATA = Path(__file__).parent / "data"
SUMMARIZATION = DATA / "summarization_preprocessing.yaml"
MULTI_TURN = DATA / "multi_turn_dialogue_preprocessing.yaml"
TUTORIAL = DATA / "finetuning_tutorial_train_data_config.yaml"
SPECIALS = ["<s>", "</s>", "[INST]", "[/INST]"]
LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'system' %}"
    "{{ '<<SYS>>\\n' + message['content'] + '\\n<</SYS>>\\n\\n' }}{% else %}"
    "{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)
"""A Llama-2-like chat template: the EOS closes each assistant turn."""


def _tokenizer(folder: Path) -> Path:
    """A byte-level BPE tokenizer folder with BOS <s>, EOS </s> and the template above."""
    pre = tokenizers.pre_tokenizers
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIALS, initial_alphabet=pre.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(["The cat sat on the mat.", "Summaries are short."] * 9, trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)]
    )
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2_TEMPLATE}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def _jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with ./tokenizer, ./summarization_data and ./chat_data."""
    _tokenizer(tmp_path / "tokenizer")
    articles = [
        {"source": f"Article {i}: the cat sat on the mat {'again ' * i}today.",
         "target": f"Cat sat {i}."}
        for i in range(12)
    ]  # fmt: skip
    _jsonl(tmp_path / "summarization_data" / "xsum.jsonl", articles)
    chats = [
        {"messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"Where did the cat sit ({i})?"},
            {"role": "assistant", "content": "On the mat."},
            {"role": "user", "content": "And then?"},
            {"role": "assistant", "content": f"It sat {i} times."},
        ]}
        for i in range(12)
    ]  # fmt: skip
    _jsonl(tmp_path / "chat_data" / "chats.jsonl", chats)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _read(folder: Path) -> np.ndarray:
    with h5py.File(sorted(folder.glob("*.h5"))[0], "r") as file:
        return file["data"][()]


def test_model_zoo_files_run_as_written(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preprocess", "--config", str(SUMMARIZATION)]) == 0
    notes = capsys.readouterr().err
    for key in ("processing.write_in_batch", "processing.short_seq_prob"):
        assert notes.count(f"{key} has no effect here") == 1
    assert f"{SUMMARIZATION}:23:5: processing.write_in_batch" in notes  # where the file has it
    assert "setup.processes" not in notes  # processes: N runs N worker processes
    data = _read(workdir / "data_dir_summarization")
    assert data.shape == (12, 3, 2048)
    params = json.loads((workdir / "data_dir_summarization/data_params.json").read_text())
    assert params["dataset"]["sep_token"] is None  # null: no separator, as in Model Zoo
    assert params["post-process"]["n_examples"] == 12
    assert main(["preprocess", "--config", str(MULTI_TURN)]) == 0
    chat = _read(workdir / "data_dir_chat")
    assert chat.shape == (12, 3, 4096)
    # two assistant answers per chat, each closed by the EOS it learns to emit
    eos = 1
    assert all(int(((row[2] == eos) & (row[1] == 1)).sum()) == 2 for row in chat)


@pytest.mark.slow
def test_the_tutorials_fine_tuning_data_trains(workdir: Path) -> None:
    """Model Zoo's fine-tuning tutorial data file (a local copy of its records), then a
    short fit of a tiny Llama on what it wrote: the masked loss falls."""
    import torch

    import plugtrain
    from plugtrain_models.data.map_processor import gpt_hdf5_map_loader
    from plugtrain_models.families import build_decoder

    records = [
        {"document": f"The cat sat on the mat {i} times today.", "summary": f"Cat sat {i}."}
        for i in range(8)
    ]
    _jsonl(workdir / "xsum_tiny" / "train.jsonl", records)
    assert main(["preprocess", "--config", str(TUTORIAL)]) == 0
    torch.manual_seed(0)
    keys = {"vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 1, "num_heads": 2,
            "filter_size": 64, "max_position_embeddings": 2048, "rotary_dim": 16,
            "position_embedding_type": "rotary", "loss_scaling": "num_tokens"}  # fmt: skip
    model = build_decoder("llama", keys)
    loader = gpt_hdf5_map_loader(
        data_dir="finetuning_tutorial/train_data", batch_size=2, shuffle=True, shuffle_seed=1337
    )
    trainer = plugtrain.Trainer(
        device="CPU", model_dir=workdir / "model", model=model, seed=1,
        optimizer={"AdamW": {"lr": 0.02}}, loop={"max_steps": 8, "eval_frequency": 0},
        checkpoint={"steps": 8},
    )  # fmt: skip
    before = trainer.validate(loader, ckpt_path=None)["loss"]
    trainer.fit(loader)
    after = trainer.validate(loader, ckpt_path=None)["loss"]
    assert after < 0.8 * before  # 8 steps of AdamW on 8 records: the masked loss falls


def _write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """\
setup:
  data: {type: local, source: ./summarization_data}
  output_dir: ./out
  mode: finetuning
processing:
  huggingface_tokenizer: ./tokenizer
  max_seq_length: 64
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:\\
    prompt_completion_text_read_hook"
  read_hook_kwargs: {prompt_key: source, completion_key: target}
"""


ERRORS = [
    ("max_seq_length: 64", "max_seq_lenght: 64", ":7:3: processing.max_seq_lenght: unknown key"),
    ("max_seq_length: 64", "max_seq_length: x", ":7:19: processing.max_seq_length: must be an"),
    (
        "type: local",
        "type: huggingface",
        ":2:16: setup.data.type: Hub data sets are not downloaded",
    ),
    (
        "./tokenizer",
        "meta/llama",
        ":6:26: processing.huggingface_tokenizer: meta/llama: not a local",
    ),
    (
        "mode: finetuning",
        "mode: nlg",
        ":4:9: setup.mode: must be one of pretraining, finetuning, dpo",
    ),
    ("max_seq_length: 64", "token_limit: 9", ":7:3: processing.token_limit: token_limit is not"),
    (
        "  prompt_completion_text_read_hook",
        "  nope",
        ":8:14: processing.read_hook: read hook 'nope'",
    ),
]
"""(written, written instead, the error's start): each at the file's line and column."""


@pytest.mark.parametrize(("written", "instead", "expected"), ERRORS)
def test_config_errors_name_file_line_and_column(
    workdir: Path, capsys: pytest.CaptureFixture[str], written: str, instead: str, expected: str
) -> None:
    config = _write_config(workdir / "bad.yaml", GOOD.replace(written, instead))
    assert main(["preprocess", "--config", str(config)]) != 0
    error = capsys.readouterr().err
    assert expected in error
    assert "Traceback" not in error
    assert not (workdir / "out").exists()


def test_a_failed_run_leaves_no_output_folder(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "summarization_data" / "broken.jsonl").write_text('{"source": "a", \n')
    config = _write_config(workdir / "run.yaml", GOOD.replace("./out", "./new/deep/out"))
    assert main(["preprocess", "--config", str(config)]) != 0
    assert "broken.jsonl:1: not a JSON record" in capsys.readouterr().err
    assert not (workdir / "new").exists()
    assert main(["preprocess", "missing.txt", "-o", "flag_out"]) != 0  # the flag form too
    assert not (workdir / "flag_out").exists()


PRETRAINING = """\
setup:
  data: {type: local, source: ./text}
  output_dir: ./pretraining
  mode: pretraining
processing:
  huggingface_tokenizer: ./tokenizer
  max_seq_length: 16
  min_sequence_len: 2
  use_ftfy: false
  read_hook: "cerebras.modelzoo.data_preparation.data_preprocessing.hooks:text_read_hook"
  read_hook_kwargs: {text_key: text}
dataset: {use_vsl: VSL}
"""


@pytest.mark.parametrize("use_vsl", [False, True])
def test_pretraining_text_is_packed_or_vsl_packed(workdir: Path, use_vsl: bool) -> None:
    from plugtrain_models.data.tokenizer_folder import TokenizerFolder

    texts = ["The cat sat on the mat.", "  Summaries are short. ", "The mat."]
    _jsonl(workdir / "text" / "t.jsonl", [{"text": t} for t in texts])
    text = PRETRAINING.replace("VSL", "true" if use_vsl else "false")
    assert main(["preprocess", "--config", str(_write_config(workdir / "p.yaml", text))]) == 0
    data = _read(workdir / "pretraining")
    tokenizer = TokenizerFolder(workdir / "tokenizer")
    documents = [tokenizer.encode(t.strip())[0] + [1] for t in texts]  # BOS ... EOS
    if not use_vsl:
        stream = [t for d in documents for t in d]
        chunks = [stream[i : i + 17] for i in range(0, len(stream), 17)]
        expected = [(c + [1] * (17 - len(c)), len(c) - 1) for c in chunks]
        np.testing.assert_array_equal(data[:, 0], [c[:-1] for c, _ in expected])
        np.testing.assert_array_equal(data[:, 2], [c[1:] for c, _ in expected])
        np.testing.assert_array_equal(data[:, 1].sum(axis=1), [n for _, n in expected])
        return
    pieces = [d[i : i + 16] for d in documents for i in range(0, len(d), 16)]
    bins: list[list[list[int]]] = []  # first fit: the earliest bin with room
    for piece in pieces:
        target = next((b for b in bins if sum(map(len, b)) + len(piece) <= 16), None)
        if target is None:
            bins.append([piece])
        else:
            target.append(piece)
    assert data.shape == (len(bins), 5, 16)
    for rows, members in zip(data, bins, strict=True):
        ids = [t for piece in members for t in piece]
        # no loss on the first token of a piece: it is not predicted from its own document
        mask = [m for piece in members for m in [0] + [1] * (len(piece) - 1)]
        lengths = [len(p) for p in members[:-1]] + [len(members[-1]) - 1]
        spans = [s for n in lengths for s in range(n - 1, -1, -1)]
        fill = 16 - sum(lengths)
        np.testing.assert_array_equal(rows[0], ids[:-1] + [1] * fill)
        np.testing.assert_array_equal(rows[1], mask[1:] + [0] * fill)
        np.testing.assert_array_equal(rows[3], spans + [0] * fill)
        np.testing.assert_array_equal(rows[4], [i for n in lengths for i in range(n)] + [0] * fill)


def test_the_flag_form_takes_a_tokenizer_folder(workdir: Path) -> None:
    (workdir / "doc.txt").write_text("The cat sat on the mat.\nSummaries are short.\n")
    assert main(["preprocess", "doc.txt", "-o", "flags", "--tokenizer", "tokenizer"]) == 0
    params = json.loads((workdir / "flags" / "data_params.json").read_text())
    assert params["eos_id"] == 1  # the folder's eos_token </s>
    tokenizer = json.loads((workdir / "tokenizer" / "tokenizer.json").read_text())
    assert params["vocab_size"] == len(tokenizer["model"]["vocab"])
