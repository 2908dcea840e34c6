"""BertTokenClassifierDataProcessor and BertSumCSVDataProcessor: fine-tuning rows from CSV."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.csvfiles import CsvRows
from plugtrain_models.encoder_data.order import EpochOrder
from plugtrain_models.encoder_data.paths import resolved
from plugtrain_models.encoder_data.vocab import Vocabulary

__all__ = ["bert_sum_loader", "token_classifier_loader"]


def _folders(data_dir: str | list[str]) -> list[str]:
    return [
        resolved("data_dir", d) for d in ([data_dir] if isinstance(data_dir, str) else data_dir)
    ]


def _padded(values: np.ndarray, length: int, pad: int) -> np.ndarray:
    """``values`` cut or padded with ``pad`` to ``length`` (Model Zoo's pad_input_sequence)."""
    out = np.full(length, pad, dtype=np.int32)
    out[: min(length, len(values))] = values[:length]
    return out


def _label_map(label_vocab_file: str | None, folder: str) -> tuple[dict[str, int], str]:
    path = (
        label_vocab_file if label_vocab_file is not None else os.path.join(folder, "label2id.json")
    )
    if label_vocab_file is None and not os.path.isfile(path):
        message = (
            f"give label_vocab_file: the data folder {folder} has no label2id.json (Model Zoo "
            "takes the model's label_vocab_file)"
        )
        raise TrainingError(message)
    path = resolved("label_vocab_file", path)
    with open(path, encoding="utf-8") as file:
        mapping = json.load(file)
    if not isinstance(mapping, dict) or not all(isinstance(v, int) for v in mapping.values()):
        raise TrainingError(f"{path}: a label vocabulary is a JSON object {{label: id}}")
    return mapping, path


def _order(
    count: int, batch_size: int, shuffle: bool, seed: int, drop_last: bool
) -> Callable[[int, int], EpochOrder]:
    return lambda rank, world: EpochOrder(
        count, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last,
        rank=rank, world_size=world,
    )  # fmt: skip


def token_classifier_loader(
    *,
    batch_size: int,
    data_dir: str | list[str],
    vocab_file: str,
    max_sequence_length: int,
    label_vocab_file: str | None = None,
    do_lower: bool = False,
    include_padding_in_loss: bool = False,
    labels_pad_id: int | None = None,
    input_pad_id: int | None = None,
    attn_mask_pad_id: int | None = None,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """The NER batches of the CSV files of ``data_dir``; the schema documents every argument."""
    folders = _folders(data_dir)
    rows = CsvRows(folders)
    vocab = Vocabulary(resolved("vocab_file", vocab_file), do_lower=do_lower)
    labels_map, labels_path = _label_map(label_vocab_file, folders[0])
    pad = vocab.id("[pad]" if do_lower else "[PAD]")
    pads = [
        pad if value is None else value for value in (labels_pad_id, input_pad_id, attn_mask_pad_id)
    ]

    def make(item: tuple[int, int]) -> Sample:
        row = rows.row(item[1])
        tokens = row.field("tokens").split()
        tokens = [token.lower() for token in tokens] if do_lower else tokens
        labels = row.field("labels").split()
        if len(labels) != len(tokens) or len(tokens) > max_sequence_length:
            message = (
                f"{row.where()}: {len(tokens)} tokens and {len(labels)} labels (one label per "
                f"token, at most max_sequence_length {max_sequence_length})"
            )
            raise TrainingError(message)
        unknown = sorted(set(labels) - set(labels_map))
        if unknown:
            raise TrainingError(f"{row.where()}: labels {unknown} are not in {labels_path}")
        count = len(tokens)
        input_ids = _padded(np.asarray(vocab.encode(tokens)), max_sequence_length, pads[1])
        attention = np.full(max_sequence_length, pads[2], dtype=np.int32)
        attention[:count] = 1
        label_ids = _padded(
            np.asarray([labels_map[name] for name in labels]), max_sequence_length, pads[0]
        )
        return {
            "input_ids": input_ids,
            "attention_mask": attention,
            "loss_mask": np.ones_like(attention) if include_padding_in_loss else attention.copy(),
            "token_type_ids": np.zeros(max_sequence_length, dtype=np.int32),
            "labels": label_ids,
        }

    dataset = SampleBatches(make, count=len(rows), describe=lambda item: rows.row(item[1]).where())
    return loader(
        dataset,
        _order(len(rows), batch_size, shuffle, shuffle_seed or 0, drop_last),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )


def bert_sum_loader(
    *,
    batch_size: int,
    data_dir: str | list[str],
    max_sequence_length: int,
    max_cls_tokens: int,
    vocab_file: str | None = None,
    pad_id: int | None = None,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """The summarization batches of the CSV files of ``data_dir``; the schema documents them."""
    rows = CsvRows(_folders(data_dir))
    if pad_id is None:
        pad_id = 0
        if vocab_file is not None:
            pad_id = Vocabulary(resolved("vocab_file", vocab_file)).id("[PAD]")

    def make(item: tuple[int, int]) -> Sample:
        row = rows.row(item[1])
        input_ids = _padded(row.ints("input_token_ids"), max_sequence_length, pad_id)
        cls_indices = _padded(row.ints("cls_indices"), max_cls_tokens, pad_id)
        return {
            "input_ids": input_ids,
            "token_type_ids": _padded(row.ints("segment_ids"), max_sequence_length, pad_id),
            "attention_mask": (input_ids != pad_id).astype(np.int32),
            "labels": _padded(row.ints("labels"), max_cls_tokens, pad_id),
            "cls_indices": cls_indices,
            "cls_weights": (cls_indices != pad_id).astype(np.float32),
        }

    dataset = SampleBatches(make, count=len(rows), describe=lambda item: rows.row(item[1]).where())
    return loader(
        dataset,
        _order(len(rows), batch_size, shuffle, shuffle_seed or 0, drop_last),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
