"""BertCSVDynamicMaskDataProcessor and BertCSVDataProcessor: BERT rows from CSV folders."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.csvfiles import CsvRows, Row
from plugtrain_models.encoder_data.masking import Masked, MaskingRule, mask_tokens, sample_rng
from plugtrain_models.encoder_data.order import EpochOrder
from plugtrain_models.encoder_data.paths import resolved
from plugtrain_models.encoder_data.schemas_bert import EXCLUDED
from plugtrain_models.encoder_data.vocab import Vocabulary

__all__ = ["bert_csv_loader", "bert_dynamic_mask_loader"]


def _folders(data_dir: str | list[str]) -> list[str]:
    return [
        resolved("data_dir", d) for d in ([data_dir] if isinstance(data_dir, str) else data_dir)
    ]


def _mlm_scale(batch: Batch) -> Batch:
    """Model Zoo's ``dynamic_mlm_scale``: rows of the batch / its masked positions, [b, 1]."""
    rows = len(batch["input_ids"])
    masked = batch["masked_lm_mask"].sum().clamp(min=1).to(torch.float32)
    batch["mlm_loss_scale"] = (rows / masked).expand(rows, 1)
    return batch


def _gathered(masked: Masked, predictions: int) -> Sample:
    positions = np.nonzero(masked.masked_lm_mask)[0]
    count = len(positions)
    features = {}
    for name, values in (
        ("labels", masked.labels[positions]),
        ("masked_lm_mask", masked.masked_lm_mask[positions]),
        ("masked_lm_positions", positions),
    ):
        padded = np.zeros(predictions, dtype=np.int32)
        padded[:count] = values
        features[name] = padded
    return features


def bert_dynamic_mask_loader(
    *,
    batch_size: int,
    data_dir: str | list[str],
    vocab_file: str,
    max_sequence_length: int,
    max_predictions_per_seq: int,
    masked_lm_prob: float = 0.15,
    mask_whole_word: bool = False,
    do_lower: bool = False,
    disable_nsp: bool = False,
    dynamic_mlm_scale: bool = False,
    buckets: list[int] | None = None,
    oov_token: str = "[UNK]",
    mask_token: str = "[MASK]",
    document_separator_token: str = "[SEP]",
    exclude_from_masking: list[str] = EXCLUDED,
    gather_mlm_labels: bool = True,
    labels_pad_id: int = 0,
    input_pad_id: int = 0,
    attn_mask_pad_id: int = 0,
    segment_pad_id: int = 0,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """The masked batches of the CSV files of ``data_dir``; the schema documents every argument."""
    if buckets is not None:
        raise TrainingError("BertCSVDynamicMaskDataProcessor: buckets is not supported")
    rows = CsvRows(_folders(data_dir))
    vocab = Vocabulary(resolved("vocab_file", vocab_file), do_lower=do_lower, oov_token=oov_token)
    excluded = list(exclude_from_masking)
    if do_lower:
        excluded = [token.lower() for token in excluded]
        mask_token = mask_token.lower()
    excluded_ids = {vocab.id(token) for token in excluded}
    rule = MaskingRule(
        max_sequence_length=max_sequence_length,
        max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob,
        mask_id=vocab.id(mask_token),
        vocab_size=vocab.size,
        exclude=frozenset(excluded),
        replacement_pool=sorted(set(range(vocab.size)) - excluded_ids),
        mask_whole_word=mask_whole_word,
        input_pad_id=input_pad_id,
        attn_mask_pad_id=attn_mask_pad_id,
        labels_pad_id=labels_pad_id,
    )
    seed = shuffle_seed or 0

    def make(item: tuple[int, int]) -> Sample:
        epoch, index = item
        row = rows.row(index)
        tokens = row.literal("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise TrainingError(f"{row.where()}: column 'tokens' is not a list of strings")
        if do_lower:
            tokens = [token.lower() for token in tokens]
        if disable_nsp:
            tokens = tokens[:max_sequence_length]
        elif len(tokens) > max_sequence_length:
            message = (
                f"{row.where()}: {len(tokens)} tokens, more than max_sequence_length "
                f"{max_sequence_length} (rows are cut only with disable_nsp: true)"
            )
            raise TrainingError(message)
        masked = mask_tokens(tokens, vocab.encode(tokens), rule, sample_rng(seed, epoch, index))
        sample: Sample = {"input_ids": masked.input_ids, "attention_mask": masked.attention_mask}
        if gather_mlm_labels:
            sample.update(_gathered(masked, max_predictions_per_seq))
        else:
            sample.update(labels=masked.labels, masked_lm_mask=masked.masked_lm_mask)
        if not disable_nsp:
            segments = row.ints("segment_ids")[:max_sequence_length]
            types = np.full(max_sequence_length, segment_pad_id, dtype=np.int32)
            types[: len(segments)] = segments
            sample["token_type_ids"] = types
            sample["next_sentence_label"] = row.ints("is_random_next")[:1]
        return sample

    dataset = SampleBatches(
        make,
        finish=_mlm_scale if dynamic_mlm_scale else None,
        count=len(rows),
        describe=lambda item: rows.row(item[1]).where(),
    )
    return loader(
        dataset,
        lambda rank, world: EpochOrder(
            len(rows),
            batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            rank=rank,
            world_size=world,
        ),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )


_REQUIRED = ("input_ids", "attention_mask", "labels")
_NSP = ("token_type_ids", "next_sentence_label")


def _premasked(row: Row, disable_nsp: bool) -> Sample:
    sample = {name: row.ints(name) for name in _REQUIRED}
    if "masked_lm_positions" in row.values:
        sample["masked_lm_positions"] = row.ints("masked_lm_positions")
    if "masked_lm_weights" in row.values:
        sample["masked_lm_mask"] = row.ints("masked_lm_weights")
    if not disable_nsp:
        sample.update({name: row.ints(name) for name in _NSP if name in row.values})
    return sample


def bert_csv_loader(
    *,
    batch_size: int,
    data_dir: str | list[str],
    shuffle: bool = False,
    shuffle_seed: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 2,
    persistent_workers: bool = False,
    drop_last: bool = True,
    disable_nsp: bool = False,
    dynamic_mlm_scale: bool = False,
    buckets: list[int] | None = None,
) -> DataLoader[Batch]:
    """The pre-masked batches of the CSV files of ``data_dir``; the schema documents them."""
    if buckets is not None:
        raise TrainingError("BertCSVDataProcessor: buckets is not supported")
    rows = CsvRows(_folders(data_dir))
    seed = shuffle_seed or 0
    dataset = SampleBatches(
        lambda item: _premasked(rows.row(item[1]), disable_nsp),
        finish=_mlm_scale if dynamic_mlm_scale else None,
        count=len(rows),
        describe=lambda item: rows.row(item[1]).where(),
    )
    return loader(
        dataset,
        lambda rank, world: EpochOrder(
            len(rows),
            batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            rank=rank,
            world_size=world,
        ),
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
    )
