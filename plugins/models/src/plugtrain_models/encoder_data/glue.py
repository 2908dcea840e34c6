"""MNLIDataProcessor and SST2DataProcessor: GLUE TSV files through Model Zoo's FullTokenizer."""

from __future__ import annotations

import csv
import os

import numpy as np
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.order import EpochOrder
from plugtrain_models.encoder_data.paths import resolved
from plugtrain_models.encoder_data.vocab import Vocabulary
from plugtrain_models.encoder_data.wordpiece import FullTokenizer

__all__ = ["MNLI_LABELS", "PairEncoder", "mnli_loader", "read_tsv", "sst2_loader"]

MNLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}
"""Model Zoo's ids of MNLI's gold labels."""


def read_tsv(path: str, columns: tuple[str, ...]) -> list[list[str]]:
    """The ``columns`` of each row of a GLUE TSV file (found by its header).

    :raises TrainingError: the file or a column is missing, or a row is short.
    """
    if not os.path.isfile(path):
        raise TrainingError(f"{path}: the GLUE file does not exist")
    rows = []
    with open(path, encoding="utf-8", newline="") as file:
        reader = csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TrainingError(f"{path}: no column {', '.join(missing)} in the header")
        for number, row in enumerate(reader, start=1):
            values = [row.get(c) for c in columns]
            if any(v is None for v in values):
                raise TrainingError(f"{path}, row {number}: fewer fields than the header")
            rows.append([str(v) for v in values])
    return rows


class PairEncoder:
    """``[CLS] a [SEP] (b [SEP])`` as Model Zoo's ClassifierDataset encodes it.

    The texts are cut to fit, one token at a time from the end of the longer one;
    ``token_type_ids`` are 0 on ``[CLS] a [SEP]`` and 1 on ``b [SEP]``.
    """

    def __init__(
        self, vocab: Vocabulary, do_lower: bool, msl: int, pad: int, mask_pad: int
    ) -> None:
        self.vocab, self.msl, self.pad, self.mask_pad = vocab, msl, pad, mask_pad
        self.tokenizer = FullTokenizer(vocab.words, do_lower=do_lower)
        self.cls = vocab.id("[cls]" if do_lower else "[CLS]")
        self.sep = vocab.id("[sep]" if do_lower else "[SEP]")

    def __call__(self, first: str, second: str | None = None) -> Sample:
        """The features of one text or one pair of texts."""
        a = self.tokenizer.tokenize(first.strip())
        b = self.tokenizer.tokenize(second.strip()) if second else []
        room = self.msl - (3 if second else 2)
        while len(a) + len(b) > room:
            (a if len(a) > len(b) else b).pop()
        ids = [self.cls, *self.vocab.encode(a), self.sep]
        types = [0] * len(ids)
        if second:
            ids += [*self.vocab.encode(b), self.sep]
            types += [1] * (len(b) + 1)
        input_ids = np.full(self.msl, self.pad, dtype=np.int32)
        input_ids[: len(ids)] = ids
        mask = np.full(self.msl, self.mask_pad, dtype=np.int32)
        mask[: len(ids)] = 1
        token_types = np.zeros(self.msl, dtype=np.int32)
        token_types[: len(types)] = types
        return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": token_types}


def _glue_loader(
    rows: list[tuple[str, str | None, int, int | None]],
    encoder: PairEncoder,
    *,
    batch_size: int,
    shuffle: bool,
    shuffle_seed: int | None,
    drop_last: bool,
    num_workers: int,
    prefetch_factor: int | None,
    persistent_workers: bool,
) -> DataLoader[Batch]:
    def make(item: tuple[int, int]) -> Sample:
        first, second, label, matched = rows[item[1]]
        sample = encoder(first, second)
        sample["labels"] = np.asarray(label, dtype=np.int32)
        if matched is not None:
            sample["is_matched"] = np.asarray(matched, dtype=np.int32)
            sample["is_mismatched"] = np.asarray(1 - matched, dtype=np.int32)
        return sample

    return loader(
        SampleBatches(make, count=len(rows)),
        lambda rank, world: EpochOrder(
            len(rows),
            batch_size,
            shuffle=shuffle,
            seed=shuffle_seed or 0,
            drop_last=drop_last,
            rank=rank,
            world_size=world,
        ),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )


def mnli_loader(
    *,
    batch_size: int,
    is_training: bool,
    data_dir: str,
    vocab_file: str,
    max_sequence_length: int,
    do_lower: bool = False,
    labels_pad_id: int = 0,
    input_pad_id: int = 0,
    attn_mask_pad_id: int = 0,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """MNLI's batches; the schema documents every argument."""
    folder = resolved("data_dir", data_dir)
    vocab = Vocabulary(resolved("vocab_file", vocab_file), do_lower=do_lower)
    encoder = PairEncoder(vocab, do_lower, max_sequence_length, input_pad_id, attn_mask_pad_id)
    names = ["train"] if is_training else ["dev_matched", "dev_mismatched"]
    rows: list[tuple[str, str | None, int, int | None]] = []
    for name in names:
        path = os.path.join(folder, f"{name}.tsv")
        for number, (a, b, gold) in enumerate(
            read_tsv(path, ("sentence1", "sentence2", "gold_label")), start=1
        ):
            if gold not in MNLI_LABELS:
                known = ", ".join(MNLI_LABELS)
                message = f"{path}, row {number}: gold_label {gold!r} is not one of {known}"
                raise TrainingError(message)
            matched = None if is_training else int("mismatched" not in name)
            rows.append((a, b, MNLI_LABELS[gold], matched))
    return _glue_loader(
        rows, encoder, batch_size=batch_size, shuffle=shuffle, shuffle_seed=shuffle_seed,
        drop_last=drop_last, num_workers=num_workers, prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )  # fmt: skip


def sst2_loader(
    *,
    batch_size: int,
    is_training: bool,
    data_dir: str,
    vocab_file: str,
    max_sequence_length: int,
    do_lower: bool = False,
    labels_pad_id: int = 0,
    input_pad_id: int = 0,
    attn_mask_pad_id: int = 0,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """SST-2's batches; the schema documents every argument."""
    folder = resolved("data_dir", data_dir)
    vocab = Vocabulary(resolved("vocab_file", vocab_file), do_lower=do_lower)
    encoder = PairEncoder(vocab, do_lower, max_sequence_length, input_pad_id, attn_mask_pad_id)
    path = os.path.join(folder, "train.tsv" if is_training else "dev.tsv")
    rows: list[tuple[str, str | None, int, int | None]] = []
    for number, (sentence, label) in enumerate(read_tsv(path, ("sentence", "label")), start=1):
        if not label.strip().lstrip("-").isdigit():
            raise TrainingError(f"{path}, row {number}: label {label!r} is not an integer")
        rows.append((sentence, None, int(label), None))
    return _glue_loader(
        rows, encoder, batch_size=batch_size, shuffle=shuffle, shuffle_seed=shuffle_seed,
        drop_last=drop_last, num_workers=num_workers, prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )  # fmt: skip
