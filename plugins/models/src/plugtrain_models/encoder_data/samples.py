"""Small data sets in Model Zoo's on-disk formats, for trying a run file on a laptop and for tests.

``python -m plugtrain_models.encoder_data.samples [FOLDER]`` writes the data of the
``examples/modelzoo_*`` encoder run files (default ``runs/data/encoders``).

Each writer fills a folder (or a file) with seeded, made-up samples in the layout the matching
data processor reads, and returns what it wrote, row by row, so that a test can compare a
loader's batches with the files. Nothing here is real text.
"""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SPECIAL",
    "WORDS",
    "write_bert_hdf5",
    "write_bert_sum_csv",
    "write_dpr_hdf5",
    "write_examples",
    "write_glue",
    "write_masked_csv",
    "write_ner_csv",
    "write_premasked_csv",
    "write_t5_text",
    "write_transformer_text",
    "write_vocab",
]

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    "the", "a", "cell", "protein", "bind", "##s", "##ing", "river", "stone", "light", "run",
    "##ner", "blue", "green", "small", "large", "walk", "##ed", "house", "tree", "water",
    "sun", "moon", "star", "good", "bad", "not", "very", ".", ",", "!", "?", "un", "##able",
]  # fmt: skip
"""WordPiece words of the sample vocabularies (after :data:`SPECIAL`)."""


def write_vocab(
    path: str | Path, words: Sequence[str] = (), *, size: int | None = None
) -> list[str]:
    """A vocabulary file: one token per line; ``size`` pads it with ``[unusedN]`` lines."""
    tokens = list(words) or [*SPECIAL, *WORDS]
    if size is not None:
        tokens += [f"[unused{n}]" for n in range(size - len(tokens))]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return tokens


def _meta(folder: Path, counts: list[tuple[str, int]]) -> None:
    lines = [f"{name} {count}" for name, count in counts]
    (folder / "meta.dat").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _csv_files(folder: str | Path, header: list[str], rows: list[list[str]], files: int) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    per_file = -(-len(rows) // files)
    counts = []
    for number in range(files):
        part = rows[number * per_file : (number + 1) * per_file]
        name = f"part-{number:02d}.csv"
        with open(folder / name, "w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(header)
            writer.writerows(part)
        counts.append((name, len(part)))
    _meta(folder, counts)


def write_masked_csv(
    folder: str | Path, rows: int, max_length: int, *, seed: int = 0, files: int = 2
) -> list[dict[str, Any]]:
    """BertCSVDynamicMaskDataProcessor's rows: ``[CLS] a [SEP] b [SEP]`` of sample words."""
    rng = random.Random(seed)
    written, lines = [], []
    for _ in range(rows):
        total = rng.randint(6, max_length)
        first = rng.randint(1, total - 4)
        a = [rng.choice(WORDS) for _ in range(first)]
        b = [rng.choice(WORDS) for _ in range(total - first - 3)]
        tokens = ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
        segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        random_next = rng.randint(0, 1)
        written.append({"tokens": tokens, "segment_ids": segments, "is_random_next": random_next})
        lines.append([repr(tokens), repr(segments), str(random_next)])
    _csv_files(folder, ["tokens", "segment_ids", "is_random_next"], lines, files)
    return written


def write_premasked_csv(
    folder: str | Path,
    rows: int,
    max_length: int,
    predictions: int,
    *,
    vocab_size: int = 33,
    seed: int = 0,
) -> list[dict[str, list[int]]]:
    """BertCSVDataProcessor's rows (ESM-2's validation CSV): masked ids and gathered labels."""
    rng = random.Random(seed)
    written, lines = [], []
    for _ in range(rows):
        length = rng.randint(predictions + 2, max_length)
        ids = [rng.randrange(4, vocab_size - 2) for _ in range(length)] + [1] * (
            max_length - length
        )
        positions = sorted(rng.sample(range(1, length), rng.randint(1, predictions)))
        labels = [ids[p] for p in positions]
        for p in positions:
            ids[p] = 32 % vocab_size
        pad = predictions - len(positions)
        row = {
            "input_ids": ids,
            "attention_mask": [1] * length + [0] * (max_length - length),
            "labels": labels + [0] * pad,
            "masked_lm_positions": positions + [0] * pad,
            "masked_lm_weights": [1] * len(positions) + [0] * pad,
        }
        written.append(row)
        lines.append([repr(value) for value in row.values()])
    _csv_files(folder, list(written[0]), lines, 1)
    return written


def write_bert_hdf5(
    folder: str | Path,
    samples: int,
    length: int,
    predictions: int,
    *,
    vsl: bool = False,
    vocab_size: int = 33,
    files: int = 2,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """BertHDF5DataProcessor's files (MLM with gathered labels); returns (data, labels)."""
    import h5py

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    data = np.zeros((samples, 4 if vsl else 2, length), dtype=np.int32)
    labels = np.zeros((samples, 3, predictions), dtype=np.int32)
    for n in range(samples):
        used = int(rng.integers(predictions + 2, length + 1))
        data[n, 0, :used] = rng.integers(4, vocab_size - 2, used)
        data[n, 0, used:] = 1
        data[n, 1, :used] = 1
        positions = np.sort(rng.choice(np.arange(1, used), predictions, replace=False))
        labels[n, 0] = data[n, 0, positions]
        labels[n, 1] = positions
        labels[n, 2] = 1
        data[n, 0, positions] = 32 % vocab_size
        if vsl:
            cut = used // 2
            data[n, 2, :cut], data[n, 2, cut:used] = (
                np.arange(cut, 0, -1),
                np.arange(used - cut, 0, -1),
            )
            data[n, 3, :cut], data[n, 3, cut:used] = np.arange(cut), np.arange(used - cut)
    bounds = np.linspace(0, samples, files + 1).astype(int)
    for number in range(files):
        part = slice(bounds[number], bounds[number + 1])
        with h5py.File(folder / f"data-{number:02d}.h5", "w") as file:
            file.create_dataset("data", data=data[part])
            file.create_dataset("labels", data=labels[part])
            file.attrs["n_examples"] = bounds[number + 1] - bounds[number]
    params = {"dataset": {"training_objective": "mlm", "mlm_with_gather": True}}
    (folder / "data_params.json").write_text(json.dumps(params), encoding="utf-8")
    return data, labels


def write_ner_csv(
    folder: str | Path, rows: int, max_length: int, labels: Sequence[str], *, seed: int = 0
) -> list[dict[str, list[str]]]:
    """BertTokenClassifierDataProcessor's rows and ``label2id.json``."""
    rng = random.Random(seed)
    written = []
    for _ in range(rows):
        count = rng.randint(1, max_length)
        tokens = [rng.choice(WORDS) for _ in range(count)]
        # learnable: each word has its own label
        written.append(
            {"tokens": tokens, "labels": [labels[WORDS.index(t) % len(labels)] for t in tokens]}
        )
    lines = [[" ".join(row["tokens"]), " ".join(row["labels"])] for row in written]
    _csv_files(folder, ["tokens", "labels"], lines, 1)
    mapping = {label: index for index, label in enumerate(labels)}
    (Path(folder) / "label2id.json").write_text(json.dumps(mapping), encoding="utf-8")
    return written


def write_bert_sum_csv(
    folder: str | Path, rows: int, max_length: int, max_cls: int, *, vocab_size: int, seed: int = 0
) -> list[dict[str, list[int]]]:
    """BertSumCSVDataProcessor's rows: sentences that each start with [CLS] (id 2)."""
    rng = random.Random(seed)
    written = []
    for _ in range(rows):
        sentences = rng.randint(1, max_cls)
        ids, segments, cls = [], [], []
        for number in range(sentences):
            cls.append(len(ids))
            words = rng.randint(1, 4)
            ids += [2] + [rng.randrange(5, vocab_size) for _ in range(words)] + [3]
            segments += [number % 2] * (words + 2)
        keep = [c for c in cls if c < max_length]
        written.append(
            {"input_token_ids": ids, "labels": [rng.randint(0, 1) for _ in cls],
             "segment_ids": segments, "cls_indices": cls[: len(keep)]}
        )  # fmt: skip
    header = ["input_token_ids", "labels", "segment_ids", "cls_indices"]
    _csv_files(folder, header, [[repr(row[k]) for k in header] for row in written], 1)
    return written


def write_glue(folder: str | Path, task: str, rows: int, *, seed: int = 0) -> dict[str, list[Any]]:
    """GLUE TSVs of ``task`` (``mnli`` or ``sst2``) with sample-word sentences."""
    rng = random.Random(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def sentence() -> str:
        words = [w for w in WORDS if not w.startswith("##")]
        return " ".join(rng.choice(words) for _ in range(rng.randint(2, 8))).capitalize()

    written: dict[str, list[Any]] = {}
    if task == "sst2":
        for name in ("train", "dev"):
            table = []
            for _ in range(rows):  # learnable: the label says whether "good" or "bad" is in it
                label, words = rng.randint(0, 1), sentence().split()
                words.insert(rng.randint(0, len(words)), "good" if label else "bad")
                table.append((" ".join(words), label))
            lines = ["sentence\tlabel", *(f"{s}\t{label}" for s, label in table)]
            (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
            written[name] = table
        return written
    columns = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
               "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
               "sentence2", "label1", "gold_label"]  # fmt: skip
    for name in ("train", "dev_matched", "dev_mismatched"):
        table = []
        for _ in range(rows):
            gold = rng.choice(["entailment", "neutral", "contradiction"])
            table.append((sentence(), sentence(), gold))
        lines = ["\t".join(columns)] + [
            "\t".join([str(i), "0", "0", "fiction", "(", "(", "(", "(", a, b, gold, gold])
            for i, (a, b, gold) in enumerate(table)
        ]
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        written[name] = table
    return written


def write_dpr_hdf5(
    folder: str | Path,
    samples: int,
    length: int,
    contexts: int,
    *,
    vocab_size: int,
    files: int = 2,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """DPRHDF5DataProcessor's files; returns (data_0 [N,3,S], data_1 [N,3,C,S])."""
    import h5py

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    questions = np.zeros((samples, 3, length), dtype=np.int32)
    passages = np.zeros((samples, 3, contexts, length), dtype=np.int32)
    for n in range(samples):
        used = int(rng.integers(3, length + 1))
        questions[n, 0, :used] = rng.integers(4, vocab_size, used)
        questions[n, 1, :used] = 1
        for c in range(contexts):
            used = int(rng.integers(3, length + 1))
            passages[n, 0, c, :used] = rng.integers(4, vocab_size, used)
            passages[n, 1, c, :used] = 1
            passages[n, 2, c, :used] = 1 if c else 0
    bounds = np.linspace(0, samples, files + 1).astype(int)
    for number in range(files):
        part = slice(bounds[number], bounds[number + 1])
        with h5py.File(folder / f"dpr-{number:02d}.h5", "w") as file:
            file.create_dataset("data_0", data=questions[part])
            file.create_dataset("data_1", data=passages[part])
            file.attrs["n_examples"] = bounds[number + 1] - bounds[number]
    names = {
        "data_0_features": [
            "questions_input_ids",
            "questions_attention_mask",
            "questions_token_type_ids",
        ],
        "data_1_features": ["ctx_input_ids", "ctx_attention_mask", "ctx_token_type_ids"],
    }
    (folder / "data_params.json").write_text(json.dumps(names), encoding="utf-8")
    return questions, passages


def _pieces(size: int) -> list[str]:
    return ["<pad>", "</s>", "<unk>", *(f"▁w{n}" for n in range(size - 3))]


def write_t5_text(
    folder: str | Path, documents: int, *, vocab: str | Path, vocab_size: int = 96, seed: int = 0
) -> list[list[str]]:
    """T5DynamicDataProcessor's text files (one document of pieces per line) and vocabulary."""
    rng = random.Random(seed)
    words = write_vocab(vocab, _pieces(vocab_size))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = [
        [rng.choice(words[3:]) for _ in range(rng.randint(5, 200))] for _ in range(documents)
    ]
    half = documents // 2
    for name, part in (("c4-00.txt", written[:half]), ("c4-01.txt", written[half:])):
        (folder / name).write_text("".join(" ".join(d) + "\n" for d in part), encoding="utf-8")
    _meta(folder, [("c4-00.txt", half), ("c4-01.txt", documents - half)])
    return written


def write_transformer_text(
    source: str | Path, pairs: int, *, vocab: str | Path, vocab_size: int = 96, seed: int = 0
) -> list[tuple[list[str], list[str]]]:
    """A source file ``X.en`` with its aligned target ``X.de`` and a shared BPE vocabulary."""
    rng = random.Random(seed)
    words = write_vocab(
        vocab, ["<pad>", "<unk>", "<s>", "</s>", *(f"w{n}@@" for n in range(vocab_size - 4))]
    )
    source = Path(source)
    source.parent.mkdir(parents=True, exist_ok=True)
    written = [
        ([rng.choice(words[4:]) for _ in range(rng.randint(1, 30))],
         [rng.choice(words[4:]) for _ in range(rng.randint(1, 30))])
        for _ in range(pairs)
    ]  # fmt: skip
    target = source.with_suffix(".de")
    source.write_text("".join(" ".join(a) + "\n" for a, _ in written), encoding="utf-8")
    target.write_text("".join(" ".join(b) + "\n" for _, b in written), encoding="utf-8")
    return written


def write_examples(out: str | Path) -> list[Path]:
    """The data the ``examples/modelzoo_*`` encoder run files read, under ``out``.

    :returns: the folders and files written.
    """
    out = Path(out)
    write_vocab(out / "vocab.txt")
    write_masked_csv(out / "bert" / "train", 256, 64, seed=1)
    write_masked_csv(out / "bert" / "val", 32, 64, seed=2)
    write_glue(out / "sst2", "sst2", 256, seed=3)
    write_ner_csv(out / "ner" / "train", 256, 32, ["O", "B-Chemical", "I-Chemical"], seed=4)
    write_ner_csv(out / "ner" / "dev", 32, 32, ["O", "B-Chemical", "I-Chemical"], seed=5)
    write_bert_sum_csv(out / "summarization" / "train", 256, 128, 8, vocab_size=39, seed=6)
    write_bert_sum_csv(out / "summarization" / "valid", 32, 128, 8, vocab_size=39, seed=7)
    write_bert_hdf5(out / "esm2" / "train", 256, 64, 8, seed=8)
    write_premasked_csv(out / "esm2" / "val", 32, 64, 8, seed=9)
    write_dpr_hdf5(out / "dpr" / "train", 256, 32, 2, vocab_size=39, seed=10)
    write_t5_text(out / "t5" / "train", 256, vocab=out / "t5" / "vocab.txt", seed=11)
    write_t5_text(out / "t5" / "val", 32, vocab=out / "t5" / "vocab.txt", seed=12)
    write_transformer_text(
        out / "wmt" / "train.bpe.en", 512, vocab=out / "wmt" / "vocab.bpe", seed=13
    )
    write_transformer_text(out / "wmt" / "val.bpe.en", 64, vocab=out / "wmt" / "vocab.bpe", seed=14)
    return sorted(out.iterdir())


if __name__ == "__main__":
    import sys

    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/data/encoders"
    for path in write_examples(folder):
        print(path)
