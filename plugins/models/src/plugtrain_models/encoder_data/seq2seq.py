"""T5DynamicDataProcessor and TransformerDynamicDataProcessor: text streamed from files.

Both read their files in order each epoch (with ``shuffle``, the files in a permutation of
``random.Random(shuffle_seed + epoch)`` and the samples through a buffer), cut the global
batches from the stream (:class:`~plugtrain_models.encoder_data.order.StreamOrder`) and build
each sample from its order item, T5's noise spans with a numpy ``default_rng`` seeded from
``shuffle_seed``, the epoch, the document and the piece.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from plugtrain.errors import TrainingError
from plugtrain_models.encoder_data.batches import Batch, Sample, SampleBatches, loader
from plugtrain_models.encoder_data.csvfiles import read_meta
from plugtrain_models.encoder_data.order import StreamOrder
from plugtrain_models.encoder_data.paths import resolved
from plugtrain_models.encoder_data.span_corruption import (
    corrupt,
    random_chunk,
    raw_lengths,
    split_sequences,
)
from plugtrain_models.encoder_data.vocab import Vocabulary

__all__ = ["SpecialIds", "parallel_files", "t5_loader", "transformer_loader"]


class SpecialIds:
    """The ids of the special tokens in the vocabulary (Model Zoo's lookup, OOV included)."""

    def __init__(self, vocab: Vocabulary, arguments: dict[str, Any]) -> None:
        names = {k: arguments[k] for k in ("sos_token", "eos_token", "pad_token")}
        if arguments["do_lower"]:  # Model Zoo lower-cases the special tokens only
            names = {k: v.lower() for k, v in names.items()}
        pad = vocab.id(names["pad_token"])
        self.eos = vocab.id(names["eos_token"])
        self.start = vocab.id(names["sos_token"]) if names["sos_token"] in vocab else pad
        given = arguments["input_pad_id"], arguments["labels_pad_id"]
        self.input_pad = pad if given[0] is None else given[0]
        self.labels_pad = pad if given[1] is None else given[1]


def _buffered(items: Iterator[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """Model Zoo's buffered shuffle: once full, each new item replaces a random one."""
    buffer: list[Any] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = rng.randrange(size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def _lines(path: str, count: int) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace", newline="") as file:
        for number, line in enumerate(file):
            if number >= count:
                return
            yield line.replace("\0", "")


def _padded_pair(
    inputs: np.ndarray, labels: np.ndarray, ids: SpecialIds, src: int, tgt: int
) -> Sample:
    """Model Zoo's ``pad_t5_input_features``; the decoder input is labels shifted right."""
    sample = {
        "input_ids": np.full(src, ids.input_pad, dtype=np.int32),
        "attention_mask": np.zeros(src, dtype=np.int32),
        "decoder_input_ids": np.full(tgt, ids.input_pad, dtype=np.int32),
        "decoder_attention_mask": np.zeros(tgt, dtype=np.int32),
        "labels": np.full(tgt, ids.labels_pad, dtype=np.int32),
    }
    sample["input_ids"][: len(inputs)] = inputs
    sample["attention_mask"][: len(inputs)] = 1
    sample["labels"][: len(labels)] = labels
    sample["decoder_input_ids"][: len(labels)] = np.concatenate([[ids.start], labels[:-1]])
    sample["decoder_attention_mask"][: len(labels)] = 1
    return sample


def _loss_weight(batch: Batch) -> Batch:
    """Model Zoo's ``dynamic_loss_weight``: rows / decoder tokens of the batch, [b, 1]."""
    rows = len(batch["labels"])
    tokens = batch["decoder_attention_mask"].sum().clamp(min=1).float()
    batch["loss_weight"] = (rows / tokens).expand(rows, 1)
    return batch


def _stream_loader(
    items: Callable[[int], Iterator[Any]], make: Callable[[Any], Sample], a: dict[str, Any]
) -> DataLoader[Batch]:
    dataset = SampleBatches(make, finish=_loss_weight if a["dynamic_loss_weight"] else None)
    return loader(
        dataset,
        lambda rank, world: StreamOrder(
            items, a["batch_size"], drop_last=a["drop_last"], rank=rank, world_size=world
        ),
        num_workers=a["num_workers"],
        prefetch_factor=a["prefetch_factor"],
        persistent_workers=a["persistent_workers"],
    )


def _files(entries: list[Any], shuffle: bool, seed: int, epoch: int) -> list[tuple[int, Any]]:
    """``(first global line, entry)`` of each file, in this epoch's reading order."""
    starts = np.cumsum([0] + [count for _, count in entries]).tolist()
    files = list(zip(starts[:-1], entries, strict=True))
    if shuffle:
        random.Random(seed + epoch).shuffle(files)
    return files


def t5_loader(
    *,
    batch_size: int,
    src_data_dir: str,
    src_vocab_file: str,
    src_max_sequence_length: int,
    tgt_max_sequence_length: int,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    shuffle_buffer: int | None = None,
    extra_ids: int = 0,
    do_lower: bool = False,
    buckets: list[int] | None = None,
    dynamic_loss_weight: bool = False,
    pack_sequences: bool = False,
    num_documents_to_concatenate: int = 128,
    oov_token: str = "<unk>",
    sos_token: str = "<s>",
    eos_token: str = "</s>",
    pad_token: str = "<pad>",
    labels_pad_id: int | None = None,
    input_pad_id: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """T5's span-corrupted batches; the schema documents every argument."""
    a = dict(locals())
    if buckets is not None:
        raise TrainingError("T5DynamicDataProcessor: buckets is not supported")
    folder = resolved("src_data_dir", src_data_dir)
    entries = [(names[0], count) for names, count in read_meta(folder)]
    vocab = Vocabulary(
        resolved("src_vocab_file", src_vocab_file),
        oov_token=oov_token.lower() if do_lower else oov_token,
    )
    ids = SpecialIds(vocab, a)
    raw, target = raw_lengths(src_max_sequence_length)
    if target > tgt_max_sequence_length:
        message = (
            f"span corruption of {src_max_sequence_length} input tokens makes targets of up to "
            f"{target} tokens: tgt_max_sequence_length {tgt_max_sequence_length} is too small"
        )
        raise TrainingError(message)
    seed, vocab_size = shuffle_seed or 0, vocab.size + extra_ids

    def documents(epoch: int) -> Iterator[tuple[int, list[int]]]:
        for first, (path, count) in _files(entries, shuffle, seed, epoch):
            for number, line in enumerate(_lines(path, count)):
                doc = first + number
                chunk = random_chunk(
                    vocab.encode(line.split()), np.random.default_rng([seed, epoch, doc])
                )
                yield doc, chunk

    def packed(epoch: int) -> Iterator[tuple[int, list[int]]]:
        group: list[int] = []
        first, members = 0, 0
        for doc, tokens in documents(epoch):
            first = doc if not members else first
            group.extend(tokens)
            members += 1
            if members == num_documents_to_concatenate:  # an incomplete group is dropped
                yield first, group
                group, members = [], 0

    def items(epoch: int) -> Iterator[Any]:
        source = packed(epoch) if pack_sequences else documents(epoch)
        pieces = (
            (epoch, doc, number, piece)
            for doc, tokens in source
            for number, piece in enumerate(split_sequences(tokens, raw))
            if piece
        )
        if shuffle:
            return _buffered(pieces, shuffle_buffer or 10 * batch_size, random.Random(seed + epoch))
        return pieces

    def make(item: tuple[int, int, int, list[int]]) -> Sample:
        epoch, doc, number, piece = item
        rng = np.random.default_rng([seed, epoch, doc, number])
        inputs, labels = corrupt(piece, vocab_size, ids.eos, rng)
        return _padded_pair(inputs, labels, ids, src_max_sequence_length, tgt_max_sequence_length)

    return _stream_loader(items, make, a)


def parallel_files(src_data_dir: str) -> list[tuple[tuple[str, str], int]]:
    """``((source, target), lines)`` of each pair of aligned files.

    A folder: its ``meta.dat`` (``SOURCE TARGET COUNT`` per line, Model Zoo's layout). A file
    ``STEM.xx``: its target is the one other ``STEM.yy`` beside it.

    :raises TrainingError: no target, or several.
    """
    if os.path.isdir(src_data_dir):
        return [((names[0], names[1]), count) for names, count in read_meta(src_data_dir, fields=3)]
    stem, _suffix = os.path.splitext(src_data_dir)
    folder = os.path.dirname(src_data_dir) or "."
    twins = sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if os.path.splitext(os.path.join(folder, name))[0] == stem
        and os.path.join(folder, name) != src_data_dir
    )
    if len(twins) != 1:
        found = ", ".join(twins) or "none"
        message = (
            f"{src_data_dir}: needs exactly one target file {stem}.<language> beside it "
            f"(found {found})"
        )
        raise TrainingError(message)
    counts = []
    for path in (src_data_dir, twins[0]):
        with open(path, "rb") as file:
            counts.append(sum(1 for _ in file))
    if counts[0] != counts[1]:
        message = (
            f"{src_data_dir} has {counts[0]} lines, its target {twins[0]} {counts[1]}: "
            "aligned files have one line per sentence pair"
        )
        raise TrainingError(message)
    return [((src_data_dir, twins[0]), counts[0])]


def transformer_loader(
    *,
    batch_size: int,
    src_data_dir: str,
    src_vocab_file: str,
    src_max_sequence_length: int,
    tgt_max_sequence_length: int,
    shuffle: bool = True,
    shuffle_seed: int | None = None,
    shuffle_buffer: int | None = None,
    extra_ids: int = 0,
    do_lower: bool = False,
    buckets: list[int] | None = None,
    dynamic_loss_weight: bool = False,
    pack_sequences: bool = False,
    num_documents_to_concatenate: int = 128,
    oov_token: str = "<unk>",
    sos_token: str = "<s>",
    eos_token: str = "</s>",
    pad_token: str = "<pad>",
    labels_pad_id: int | None = None,
    input_pad_id: int | None = None,
    num_workers: int = 0,
    prefetch_factor: int | None = 10,
    persistent_workers: bool = True,
    drop_last: bool = True,
) -> DataLoader[Batch]:
    """The transformer's translation batches; the schema documents every argument."""
    a = dict(locals())
    if buckets is not None:
        raise TrainingError("TransformerDynamicDataProcessor: buckets is not supported")
    entries = parallel_files(resolved("src_data_dir", src_data_dir))
    vocab = Vocabulary(
        resolved("src_vocab_file", src_vocab_file),
        oov_token=oov_token.lower() if do_lower else oov_token,
    )
    ids = SpecialIds(vocab, a)
    seed, size = shuffle_seed or 0, shuffle_buffer or 10 * batch_size

    def pairs(epoch: int) -> Iterator[Any]:
        for first, ((source, target), count) in _files(entries, shuffle, seed, epoch):
            for number, (src, tgt) in enumerate(
                zip(_lines(source, count), _lines(target, count), strict=False)
            ):
                a_ids, b_ids = vocab.encode(src.split()), vocab.encode(tgt.split())
                if (
                    0 < len(a_ids) < src_max_sequence_length
                    and 0 < len(b_ids) < tgt_max_sequence_length
                ):
                    yield epoch, first + number, a_ids, b_ids

    def items(epoch: int) -> Iterator[Any]:
        if not shuffle:
            yield from pairs(epoch)
            return
        rng, buffer = random.Random(seed + epoch), []
        for pair in pairs(epoch):  # Model Zoo shuffles each full buffer, then empties it
            buffer.append(pair)
            if len(buffer) == size:
                rng.shuffle(buffer)
                yield from buffer
                buffer = []
        rng.shuffle(buffer)
        yield from buffer

    def make(item: tuple[int, int, list[int], list[int]]) -> Sample:
        _epoch, _number, source, target = item
        labels = np.asarray([*target, ids.eos], dtype=np.int32)
        return _padded_pair(
            np.asarray(source, dtype=np.int32), labels, ids,
            src_max_sequence_length, tgt_max_sequence_length,
        )  # fmt: skip

    return _stream_loader(items, make, a)
