"""GLUE, NER, extractive summarization and DPR data: the files' rows, padded as Model Zoo pads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import plugtrain
from plugtrain.errors import TrainingError
from plugtrain_models.encoder_data import samples
from plugtrain_models.encoder_data.glue import MNLI_LABELS
from plugtrain_models.encoder_data.wordpiece import FullTokenizer

TEXTS = [
    "The runner walked, not very unable!",
    "Héllo wörld: the CELL binds... (water)?",
    "水 moon star\u00a0sun — green-blue",
    "Unknownwords stay xyzzy; small trees",
    "a" * 250,
]


def _loader(name: str, **arguments: Any) -> Any:
    return plugtrain.resolve("dataloader", name)(**arguments)


def _vocab(path: Path, lower: bool) -> list[str]:
    words = [w.lower() if lower else w for w in samples.WORDS]
    extra = ["héllo", "wörld", "hello", "world", "水", "water", ":", "(", ")", ";", "-", "—"]
    extra += ["Héllo", "The", "CELL", "Unknown", "##words", "sta", "##y", "tree", "##s"]
    return samples.write_vocab(path, [*samples.SPECIAL, *dict.fromkeys(words + extra)])


@pytest.mark.parametrize("lower", [True, False])
def test_full_tokenizer_gives_bert_tokenizers_ids(tmp_path, lower) -> None:
    transformers = pytest.importorskip("transformers")
    words = _vocab(tmp_path / "vocab.txt", lower)
    # Model Zoo strips accents in both cases (Hugging Face only when lower-casing).
    reference = transformers.BertTokenizer(
        vocab=str(tmp_path / "vocab.txt"), do_lower_case=lower, strip_accents=True
    )
    ours = FullTokenizer(words, do_lower=lower)
    for text in TEXTS:
        expected = reference.tokenize(text)
        assert ours.tokenize(text) == expected, text
    # Model Zoo drops tabs and newlines (control characters); BERT's original splits on them.
    assert ours.tokenize("moon\tstar") == ["[UNK]"]
    assert reference.tokenize("moon\tstar") == ["moon", "star"]


def _glue(tmp_path: Path, task: str, name: str, **arguments: Any) -> Any:
    written = samples.write_glue(tmp_path / task, task, 12, seed=1)
    samples.write_vocab(tmp_path / "vocab.txt")
    return written, _loader(
        name, data_dir=str(tmp_path / task), vocab_file=str(tmp_path / "vocab.txt"),
        max_sequence_length=24, batch_size=4, shuffle=False, do_lower=True, **arguments,
    )  # fmt: skip


def test_mnli_pairs_through_the_vocabulary(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    written, loader = _glue(tmp_path, "mnli", "MNLIDataProcessor", is_training=False)
    reference = transformers.BertTokenizer(vocab=str(tmp_path / "vocab.txt"))
    rows = written["dev_matched"] + written["dev_mismatched"]
    batches = list(loader)
    assert len(batches) == 6
    for number, (a, b, gold) in enumerate(rows):
        batch, i = batches[number // 4], number % 4
        expected = reference(a, b, padding="max_length", max_length=24, truncation=True)
        assert batch["input_ids"][i].tolist() == expected["input_ids"]
        assert batch["token_type_ids"][i].tolist() == expected["token_type_ids"]
        assert batch["attention_mask"][i].tolist() == expected["attention_mask"]
        assert int(batch["labels"][i]) == MNLI_LABELS[gold]
        assert int(batch["is_matched"][i]) == int(number < 12)
        assert int(batch["is_mismatched"][i]) == int(number >= 12)


def test_sst2_sentences_and_labels(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    written, loader = _glue(tmp_path, "sst2", "SST2DataProcessor", is_training=True)
    reference = transformers.BertTokenizer(vocab=str(tmp_path / "vocab.txt"))
    batches = list(loader)
    assert set(batches[0]) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    for number, (sentence, label) in enumerate(written["train"]):
        batch, i = batches[number // 4], number % 4
        expected = reference(sentence, padding="max_length", max_length=24, truncation=True)
        assert batch["input_ids"][i].tolist() == expected["input_ids"]
        assert batch["token_type_ids"][i].tolist() == [0] * 24
        assert int(batch["labels"][i]) == label


def test_token_classifier_rows_labels_and_loss_mask(tmp_path) -> None:
    vocab = samples.write_vocab(tmp_path / "vocab.txt")
    labels = ["O", "B-Chemical", "I-Chemical"]
    rows = samples.write_ner_csv(tmp_path / "ner", 9, 12, labels)
    for padding in (False, True):
        loader = _loader(
            "BertTokenClassifierDataProcessor", data_dir=str(tmp_path / "ner"),
            vocab_file=str(tmp_path / "vocab.txt"), max_sequence_length=16, batch_size=3,
            shuffle=False, include_padding_in_loss=padding,
        )  # fmt: skip
        batches = list(loader)
        for number, row in enumerate(rows):
            batch, i, count = batches[number // 3], number % 3, len(row["tokens"])
            pad = [0] * (16 - count)
            assert batch["input_ids"][i].tolist() == [vocab.index(t) for t in row["tokens"]] + pad
            assert batch["labels"][i].tolist() == [labels.index(x) for x in row["labels"]] + pad
            assert batch["attention_mask"][i].tolist() == [1] * count + pad
            assert batch["token_type_ids"][i].tolist() == [0] * 16
            mask = [1] * 16 if padding else [1] * count + pad
            assert batch["loss_mask"][i].tolist() == mask


def test_token_classifier_names_a_row_with_an_unknown_label(tmp_path) -> None:
    samples.write_vocab(tmp_path / "vocab.txt")
    samples.write_ner_csv(tmp_path / "ner", 3, 12, ["O", "B-X"])
    (tmp_path / "ner" / "label2id.json").write_text('{"O": 0}')
    loader = _loader(
        "BertTokenClassifierDataProcessor", data_dir=str(tmp_path / "ner"),
        vocab_file=str(tmp_path / "vocab.txt"), max_sequence_length=16, batch_size=3,
        shuffle=False,
    )  # fmt: skip
    with pytest.raises(TrainingError, match=r"part-00\.csv, row \d: labels \['B-X'\] are not in"):
        next(iter(loader))


def test_bert_sum_rows_padded_with_the_pad_id(tmp_path) -> None:
    rows = samples.write_bert_sum_csv(tmp_path / "sum", 6, 48, 5, vocab_size=40)
    samples.write_vocab(tmp_path / "vocab.txt")
    loader = _loader(
        "BertSumCSVDataProcessor", data_dir=str(tmp_path / "sum"), max_sequence_length=48,
        max_cls_tokens=5, batch_size=3, shuffle=False, vocab_file=str(tmp_path / "vocab.txt"),
    )  # fmt: skip
    batches = list(loader)

    def padded(values: list[int], length: int) -> list[int]:
        return (values + [0] * length)[:length]

    for number, row in enumerate(rows):
        batch, i = batches[number // 3], number % 3
        ids = padded(row["input_token_ids"], 48)
        assert batch["input_ids"][i].tolist() == ids
        assert batch["attention_mask"][i].tolist() == [int(x != 0) for x in ids]
        assert batch["token_type_ids"][i].tolist() == padded(row["segment_ids"], 48)
        assert batch["labels"][i].tolist() == padded(row["labels"], 5)
        cls = padded(row["cls_indices"], 5)
        assert batch["cls_indices"][i].tolist() == cls
        assert batch["cls_weights"][i].tolist() == [float(x != 0) for x in cls]
        assert batch["cls_weights"].dtype == torch.float32


def test_dpr_questions_contexts_and_labels(tmp_path) -> None:
    questions, contexts = samples.write_dpr_hdf5(tmp_path / "dpr", 10, 16, 2, vocab_size=40)
    batches = list(_loader("DPRHDF5DataProcessor", data_dir=str(tmp_path / "dpr"), batch_size=5))
    assert len(batches) == 2
    names = ["input_ids", "attention_mask", "token_type_ids"]
    for row, name in enumerate(names):
        got = torch.cat([b[f"questions_{name}"] for b in batches]).tolist()
        assert got == questions[:, row].tolist()
        got = torch.cat([b[f"ctx_{name}"] for b in batches]).tolist()
        assert got == contexts[:, row].tolist()
    assert batches[0]["labels"].tolist() == [0, 2, 4, 6, 8]
    assert batches[0]["context_labels"].tolist() == [0, 1, 2, 3, 4]
