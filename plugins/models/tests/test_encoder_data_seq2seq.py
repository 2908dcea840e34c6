"""T5's span corruption and the transformer's parallel text, done in the loader."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import plugtrain
from plugtrain.errors import TrainingError
from plugtrain.train.data import DataStream
from plugtrain_models.encoder_data import samples
from plugtrain_models.encoder_data.span_corruption import raw_lengths, spans_noise_mask

VOCAB, EXTRA, SRC, TGT = 96, 6, 64, 20


def _loader(name: str, **arguments: Any) -> Any:
    return plugtrain.resolve("dataloader", name)(**arguments)


@pytest.fixture(scope="module")
def t5_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("t5")
    documents = samples.write_t5_text(root / "c4", 40, vocab=root / "vocab.txt", vocab_size=VOCAB)
    words = (root / "vocab.txt").read_text().split("\n")[:-1]
    ids = {word: index for index, word in enumerate(words)}
    return {"root": root, "documents": [[ids[w] for w in d] for d in documents]}


def _t5(t5_data: dict[str, Any], **arguments: Any) -> Any:
    arguments = {
        "shuffle": False, "batch_size": 4, "src_data_dir": str(t5_data["root"] / "c4"),
        "src_vocab_file": str(t5_data["root"] / "vocab.txt"), "extra_ids": EXTRA,
        "src_max_sequence_length": SRC, "tgt_max_sequence_length": TGT, **arguments,
    }  # fmt: skip
    return _loader("T5DynamicDataProcessor", **arguments)


def _rows(batch: dict[str, Any], name: str, mask: str) -> list[list[int]]:
    return [
        [v for v, m in zip(row, keep, strict=True) if m]
        for row, keep in zip(batch[name].tolist(), batch[mask].tolist(), strict=True)
    ]


def test_span_corruption_properties(t5_data) -> None:
    documents = t5_data["documents"]
    raw, _ = raw_lengths(SRC)
    pieces = [d[start : start + raw] for d in documents for start in range(0, len(d), raw)]
    top = VOCAB + EXTRA - 1
    noise = total = 0
    seen = []
    for batch in _t5(t5_data, drop_last=False):
        inputs = _rows(batch, "input_ids", "attention_mask")
        labels = _rows(batch, "labels", "decoder_attention_mask")
        for i, (source, target) in enumerate(zip(inputs, labels, strict=True)):
            assert source[-1] == 1  # </s>
            assert target[-1] == 1
            sentinels = [t for t in source if t > VOCAB - 1]
            assert sentinels == list(range(top, top - len(sentinels), -1))
            assert [t for t in target if t > VOCAB - 1] == sentinels
            spans: dict[int, list[int]] = {}
            for token in target[:-1]:
                if token > VOCAB - 1:
                    current = spans.setdefault(token, [])
                else:
                    current.append(token)
            restored = [x for t in source[:-1] for x in spans.get(t, [t])]
            seen.append(restored)
            noise += sum(len(s) for s in spans.values())
            total += len(restored)
            decoder = batch["decoder_input_ids"][i].tolist()
            assert decoder[: len(target)] == [0, *target[:-1]]
            assert len(source) <= SRC
    assert seen == pieces  # each piece of each document, in order
    assert noise / total == pytest.approx(0.15, abs=0.05)


def test_noise_mask_is_model_zoos() -> None:
    mask = spans_noise_mask(100, np.random.default_rng(0))
    assert mask.sum() == 15
    runs = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])) == 1)
    assert len(runs) == 5  # round(15 / 3) spans
    assert not mask[0]  # spans alternate, kept tokens first


def test_a_resumed_t5_stream_sees_the_same_noise(t5_data) -> None:
    arguments = {"shuffle": True, "shuffle_seed": 3, "shuffle_buffer": 8}
    stream = DataStream(_t5(t5_data, **arguments), None)
    for _ in range(7):
        stream.next()
    position = stream.position()
    uninterrupted = [stream.next()["input_ids"].tolist() for _ in range(12)]
    resumed = DataStream(_t5(t5_data, **arguments), position)
    assert [resumed.next()["input_ids"].tolist() for _ in range(12)] == uninterrupted


def test_t5_rank_slices_cut_the_global_batches(t5_data, monkeypatch) -> None:
    whole = [b["input_ids"] for b in _t5(t5_data, batch_size=4, shuffle=True, shuffle_seed=1)]
    sharded = _t5(t5_data, batch_size=4, shuffle=True, shuffle_seed=1)
    sharded.sampler.set_epoch(0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    halves = [b["input_ids"] for b in sharded]
    assert [h.tolist() for h in halves] == [w[2:].tolist() for w in whole]


def test_t5_refuses_a_target_length_that_cannot_hold_the_noise(t5_data) -> None:
    with pytest.raises(TrainingError, match="tgt_max_sequence_length 10 is too small"):
        _t5(t5_data, tgt_max_sequence_length=10)


def test_transformer_source_target_and_shifted_decoder_inputs(tmp_path) -> None:
    pairs = samples.write_transformer_text(
        tmp_path / "wmt" / "train.bpe.32000.en", 20, vocab=tmp_path / "vocab.bpe.32000"
    )
    words = (tmp_path / "vocab.bpe.32000").read_text().split("\n")[:-1]
    ids = {word: index for index, word in enumerate(words)}
    loader = _loader(
        "TransformerDynamicDataProcessor",
        src_data_dir=str(tmp_path / "wmt" / "train.bpe.32000.en"),
        src_vocab_file=str(tmp_path / "vocab.bpe.32000"), src_max_sequence_length=24,
        tgt_max_sequence_length=24, batch_size=4, shuffle=False, drop_last=False,
    )  # fmt: skip
    kept = [(a, b) for a, b in pairs if len(a) < 24 and len(b) < 24]
    got = []
    for batch in loader:
        sources = _rows(batch, "input_ids", "attention_mask")
        labels = _rows(batch, "labels", "decoder_attention_mask")
        decoder = _rows(batch, "decoder_input_ids", "decoder_attention_mask")
        for source, label, start in zip(sources, labels, decoder, strict=True):
            assert label[-1] == ids["</s>"]
            assert start == [ids["<s>"], *label[:-1]]
            got.append((source, label[:-1]))
    assert got == [([ids[w] for w in a], [ids[w] for w in b]) for a, b in kept]
    assert len(kept) < len(pairs)  # some pairs are too long and left out


def test_transformer_names_misaligned_files(tmp_path) -> None:
    source = tmp_path / "train.bpe.en"
    samples.write_transformer_text(source, 6, vocab=tmp_path / "vocab.bpe")
    target = source.with_suffix(".de")
    target.write_text("".join(target.read_text().splitlines(keepends=True)[:5]))
    with pytest.raises(
        TrainingError, match=r"train\.bpe\.en has 6 lines, its target .*train\.bpe\.de 5"
    ):
        _loader(
            "TransformerDynamicDataProcessor", src_data_dir=str(source),
            src_vocab_file=str(tmp_path / "vocab.bpe"), src_max_sequence_length=32,
            tgt_max_sequence_length=32, batch_size=2,
        )  # fmt: skip
