"""plugtrain preprocess: the exact token stream, written and read back by both processors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import plugtrain
from plugtrain.cli import main
from plugtrain.errors import TrainingError
from plugtrain_models.data.preprocess import main as preprocess_main

EOS = 256

LINES = [
    "Grüße aus Köln",
    "naïve café — déjà vu",
    "日本語のテキスト",
    "emoji 😀 and 🚀",
    "plain ascii line",
    "    indented code line",
]


def _write_texts(folder: Path) -> list[Path]:
    """Three .txt files, about 40 lines, multi-byte UTF-8 and a blank line among them."""
    paths = []
    for number in range(3):
        lines = [f"{LINES[(i + number) % len(LINES)]} {number}-{i}" for i in range(13)]
        lines.insert(5, "")  # skipped: blank lines are no documents
        path = folder / f"part{number}.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def _documents(paths: list[Path]) -> list[str]:
    return [
        line
        for path in paths
        for line in path.read_text(encoding="utf-8").split("\n")
        if line.strip()
    ]


def _expected_rows(docs: list[str], msl: int, min_length: int = 10) -> np.ndarray:
    """Spec 4.4 computed directly: T = tok(d1) + [eos] + ..., chunks of msl + 1, no overlap."""
    stream = [t for doc in docs for t in [*doc.encode("utf-8"), EOS]]
    rows = []
    for start in range(0, len(stream), msl + 1):
        chunk = stream[start : start + msl + 1]
        if len(chunk) < msl + 1 and len(chunk) < min_length:
            continue
        padded = chunk + [EOS] * (msl + 1 - len(chunk))
        mask = [1] * (len(chunk) - 1) + [0] * (msl + 1 - len(chunk))
        rows.append([padded[:-1], mask, padded[1:]])
    return np.asarray(rows, dtype=np.int32)


def _preprocess(*arguments: str | Path) -> None:
    assert main(["preprocess", *map(str, arguments)]) == 0


def _read_all(loader: object) -> np.ndarray:
    batches = list(loader)  # type: ignore[call-overload]
    for batch in batches:
        assert {k: v.dtype for k, v in batch.items()} == dict.fromkeys(batch, torch.int32)
    return np.stack(
        [
            torch.cat([b[name] for b in batches]).numpy()
            for name in ("input_ids", "attention_mask", "labels")
        ],
        axis=1,
    )


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, np.ndarray]:
    paths = _write_texts(tmp_path)
    out = tmp_path / "out"
    _preprocess(*paths, "-o", out, "--max-seq-length", 16, "--samples-per-file", 3)
    return out, _expected_rows(_documents(paths), 16)


def test_files_hold_the_exact_token_stream_in_model_zoo_format(
    written: tuple[Path, np.ndarray],
) -> None:
    out, expected = written
    files = sorted(out.glob("*.h5"))
    assert len(files) == -(-len(expected) // 3) > 3
    assert files[0].name == "data-00000.h5"
    parts = []
    for path in files:
        with h5py.File(path, "r") as file:
            data = file["data"]
            assert data.dtype == np.int32
            assert data.chunks == (1, 3, 16)
            assert data.compression == "gzip"
            assert file.attrs["n_examples"] == data.shape[0]
            parts.append(data[:])
    np.testing.assert_array_equal(np.concatenate(parts), expected)
    assert expected[-1, 1].sum() < 16, "the tail is padded with mask 0"
    params = json.loads((out / "data_params.json").read_text())
    assert params["features"] == ["input_ids", "attention_mask", "labels"]
    assert (params["eos_id"], params["pad_id"], params["vocab_size"]) == (EOS, EOS, 257)
    assert params["n_examples"] == len(expected)
    assert params["loss_valid_tokens"] == int(expected[:, 1].sum())
    assert params["num_pad_tokens"] == expected.size // 3 - int(expected[:, 1].sum())


def test_map_processor_reads_the_rows_back_in_order(written: tuple[Path, np.ndarray]) -> None:
    out, expected = written
    loader = plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")(
        data_dir=str(out), batch_size=2, shuffle=False, drop_last=False
    )
    np.testing.assert_array_equal(_read_all(loader), expected)


def test_iterable_processor_reads_the_same_rows(written: tuple[Path, np.ndarray]) -> None:
    out, expected = written
    loader = plugtrain.resolve("dataloader", "GptHDF5DataProcessor")(
        data_dir=str(out), batch_size=2, shuffle=False, drop_last=False
    )
    np.testing.assert_array_equal(_read_all(loader), expected)


def test_no_pack_chunks_each_document_alone_and_drops_short_tails(tmp_path: Path) -> None:
    text = tmp_path / "docs.txt"
    text.write_text("abcdefghijklmnopqrstuvwxyz\nshort\n", encoding="utf-8")
    out = tmp_path / "out"
    _preprocess(text, "-o", out, "--max-seq-length", 8, "--no-pack")
    rows = _read_all(
        plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")(
            data_dir=str(out), batch_size=1, drop_last=False
        )
    )
    # 26 letters + EOS = 27 tokens: chunks of 9, 9 and 9; "short" + EOS (6) < 10 is dropped.
    expected = _expected_rows(["abcdefghijklmnopqrstuvwxyz"], 8)
    np.testing.assert_array_equal(rows, expected)
    assert json.loads((out / "data_params.json").read_text())["dropped_tokens"] == 6


def test_shuffle_permutes_the_samples_reproducibly(tmp_path: Path) -> None:
    paths = _write_texts(tmp_path)
    for name in ("a", "b"):
        _preprocess(*paths, "-o", tmp_path / name, "--max-seq-length", 16, "--shuffle")
    reader = plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")
    first = _read_all(reader(data_dir=str(tmp_path / "a"), batch_size=1, drop_last=False))
    second = _read_all(reader(data_dir=str(tmp_path / "b"), batch_size=1, drop_last=False))
    np.testing.assert_array_equal(first, second)
    expected = _expected_rows(_documents(paths), 16)
    order = np.random.default_rng(0).permutation(len(expected))
    np.testing.assert_array_equal(first, expected[order])
    assert not np.array_equal(first, expected)


def test_jsonl_gz_input_with_a_text_key(tmp_path: Path) -> None:
    records = [{"body": "first record here"}, {"body": "second one, ünïcode"}]
    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        stream.writelines(json.dumps(r) + "\n" for r in records)
    out = tmp_path / "out"
    _preprocess(path, "-o", out, "--max-seq-length", 8, "--text-key", "body")
    rows = _read_all(
        plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")(
            data_dir=str(out), batch_size=1, drop_last=False
        )
    )
    np.testing.assert_array_equal(rows, _expected_rows([r["body"] for r in records], 8))


def test_stdlib_input_is_the_standard_library_source(tmp_path: Path) -> None:
    from plugtrain.builtin.text import stdlib_root

    out = tmp_path / "out"
    _preprocess("stdlib", "--stdlib-corpus", 3000, "-o", out, "--max-seq-length", 32)
    first = sorted(stdlib_root().glob("*.py"), key=lambda p: p.name)[0]
    head = first.read_bytes()[:33]
    with h5py.File(out / "data-00000.h5", "r") as file:
        sample = file["data"][0]
    assert bytes(sample[0].tolist()) == head[:32]
    assert bytes(sample[2].tolist()) == head[1:33]
    assert json.loads((out / "data_params.json").read_text())["num_tokens"] >= 3000


def test_corpus_format_is_one_token_stream_read_across_files(tmp_path: Path) -> None:
    paths = _write_texts(tmp_path)
    out = tmp_path / "out"
    arguments = ["--format", "corpus", "--samples-per-file", 3]
    _preprocess(*paths, "-o", out, "--max-seq-length", 16, *arguments)
    stream = np.asarray(
        [t for doc in _documents(paths) for t in [*doc.encode("utf-8"), EOS]], dtype=np.int32
    )
    files = sorted(out.glob("*.h5"))
    assert len(files) > 3
    parts = []
    for path in files:
        with h5py.File(path, "r") as file:
            assert file["data"].ndim == 1
            parts.append(file["data"][:])
    np.testing.assert_array_equal(np.concatenate(parts), stream)
    loader = plugtrain.resolve("dataloader", "GptHDF5MapDataProcessor")(
        data_dir=str(out), batch_size=1, max_sequence_length=16, drop_last=False
    )
    rows = _read_all(loader)
    assert len(rows) == (len(stream) - 1) // 16
    for index, (inputs, mask, labels) in enumerate(rows):  # windows overlap by one token
        np.testing.assert_array_equal(inputs, stream[16 * index : 16 * index + 16])
        np.testing.assert_array_equal(labels, stream[16 * index + 1 : 16 * index + 17])
        assert mask.tolist() == [1] * 16


def test_a_tokenizer_json_tokenizes_and_gives_eos(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "<|endoftext|>": 1, "hello": 2, "world": 3, "again": 4}
    model = tokenizers.models.WordLevel(vocab, unk_token="[UNK]")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    text = tmp_path / "docs.txt"
    text.write_text("hello world\nhello again world\nworld world unknown\n", encoding="utf-8")
    out = tmp_path / "out"
    _preprocess(
        text, "-o", out, "--tokenizer", tmp_path / "tokenizer.json", "--max-seq-length", 4,
        "--min-sequence-length", 2,
    )  # fmt: skip
    with h5py.File(out / "data-00000.h5", "r") as file:
        data = file["data"][:]
    # stream: 2 3 1 | 2 4 3 1 | 3 3 0 1 -> chunks of 5: [2 3 1 2 4] [3 1 3 3 0] [1]
    np.testing.assert_array_equal(data[:, 0], [[2, 3, 1, 2], [3, 1, 3, 3]])
    np.testing.assert_array_equal(data[:, 2], [[3, 1, 2, 4], [1, 3, 3, 0]])
    params = json.loads((out / "data_params.json").read_text())
    assert (params["eos_id"], params["pad_id"], params["vocab_size"]) == (1, 1, 5)


def test_a_folder_that_already_holds_h5_files_is_refused(written: tuple[Path, np.ndarray]) -> None:
    out, _ = written
    with pytest.raises(TrainingError, match=r"already holds \.h5 files"):
        preprocess_main(["stdlib", "-o", str(out)])


def test_preprocess_without_input_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["preprocess", "-o", str(tmp_path / "out")]) == 1
    assert "give an INPUT" in capsys.readouterr().err


def test_preprocess_without_plugtrain_models_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from plugtrain.commands import plugin

    monkeypatch.setattr(plugin, "_entry_points", list)  # as if plugtrain-models were not installed
    assert main(["preprocess", "stdlib", "-o", "out"]) == 1
    assert "pip install plugtrain-models" in capsys.readouterr().err
