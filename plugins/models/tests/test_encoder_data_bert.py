"""BERT's data processors: the rows of the files in order, Model Zoo's masking, exact resume."""

from __future__ import annotations

import ast
import csv
from typing import Any

import numpy as np
import pytest
import torch

import plugtrain
from plugtrain.errors import TrainingError
from plugtrain.train.data import DataStream
from plugtrain_models.encoder_data import samples
from plugtrain_models.encoder_data.masking import MaskingRule, mask_tokens, sample_rng

MSL, PREDICTIONS = 64, 12


def _loader(name: str, **arguments: Any) -> Any:
    return plugtrain.resolve("dataloader", name)(**arguments)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bert")
    vocab = samples.write_vocab(root / "vocab.txt")
    rows = samples.write_masked_csv(root / "csv", 200, MSL, seed=3)
    return {"root": root, "vocab": vocab, "rows": rows}


def _masked(corpus: dict[str, Any], **arguments: Any) -> Any:
    arguments = {"shuffle": False, **arguments}
    return _loader(
        "BertCSVDynamicMaskDataProcessor",
        data_dir=str(corpus["root"] / "csv"),
        vocab_file=str(corpus["root"] / "vocab.txt"),
        max_sequence_length=MSL,
        max_predictions_per_seq=PREDICTIONS,
        **arguments,
    )


def test_dynamic_masking_gives_the_rows_in_order_with_model_zoos_statistics(corpus) -> None:
    vocab, rows = corpus["vocab"], corpus["rows"]
    ids = {token: index for index, token in enumerate(vocab)}
    batches = list(_masked(corpus, batch_size=8))
    assert len(batches) == 25
    stats = {"maskable": 0, "selected": 0, "mask": 0, "random": 0, "kept": 0}
    special = {ids[t] for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]")}
    for number, row in enumerate(rows):
        batch, i = batches[number // 8], number % 8
        original = [ids[t] for t in row["tokens"]]
        count = len(original)
        inputs = batch["input_ids"][i].tolist()
        assert batch["attention_mask"][i].tolist() == [1] * count + [0] * (MSL - count)
        assert batch["token_type_ids"][i].tolist()[:count] == row["segment_ids"]
        assert batch["next_sentence_label"][i].tolist() == [row["is_random_next"]]
        chosen = int(batch["masked_lm_mask"][i].sum())
        positions = batch["masked_lm_positions"][i][:chosen].tolist()
        assert len(set(positions)) == chosen  # no repeat
        assert batch["masked_lm_mask"][i].tolist() == [1] * chosen + [0] * (PREDICTIONS - chosen)
        assert batch["labels"][i][:chosen].tolist() == [original[p] for p in positions]
        for position in range(MSL):
            if position not in positions:
                assert inputs[position] == (original[position] if position < count else 0)
        for position in positions:
            assert original[position] not in special
            if inputs[position] == ids["[MASK]"]:
                stats["mask"] += 1
            elif inputs[position] == original[position]:
                stats["kept"] += 1
            else:
                stats["random"] += 1
        stats["maskable"] += sum(1 for token in original if token not in special)
        stats["selected"] += chosen
    assert stats["selected"] / stats["maskable"] == pytest.approx(0.15, abs=0.04)
    assert stats["mask"] / stats["selected"] == pytest.approx(0.8, abs=0.08)
    assert stats["random"] > 0
    assert stats["kept"] > 0


def test_the_transcription_follows_model_zoos_draws() -> None:
    """The generator's draws in Model Zoo's order: shuffle the positions, then one random()
    per selected position, and a choice from the pool for a replacement."""
    tokens = ["[CLS]", "a", "b", "c", "d", "e", "f", "[SEP]"]
    ids = list(range(10, 18))
    rule = MaskingRule(
        max_sequence_length=10, max_predictions_per_seq=3, masked_lm_prob=0.5, mask_id=99,
        vocab_size=20, exclude=frozenset({"[CLS]", "[SEP]"}), replacement_pool=list(range(5)),
    )  # fmt: skip
    masked = mask_tokens(tokens, ids, rule, sample_rng(1, 2, 3))
    replay = sample_rng(1, 2, 3)
    order = list(range(8))
    replay.shuffle(order)
    chosen = [p for p in order if tokens[p] not in rule.exclude][:3]
    assert np.nonzero(masked.masked_lm_mask)[0].tolist() == sorted(chosen)
    for position in chosen:  # selection order, as Model Zoo loops
        draw = replay.random()
        expected = 99 if draw < 0.8 else ids[position]
        if 0.8 <= draw < 0.9:
            expected = replay.choice(rule.replacement_pool)
        assert masked.input_ids[position] == expected


def test_whole_word_masking_selects_every_piece_of_a_word() -> None:
    tokens = ["[CLS]", "run", "##ner", "##s", "walk", "##ed", "[SEP]"]
    rule = MaskingRule(
        max_sequence_length=8, max_predictions_per_seq=5, masked_lm_prob=0.5, mask_id=99,
        vocab_size=20, exclude=frozenset({"[CLS]", "[SEP]"}), replacement_pool=[1],
        mask_whole_word=True,
    )  # fmt: skip
    for seed in range(20):
        masked = mask_tokens(tokens, list(range(7)), rule, sample_rng(seed, 0, 0))
        chosen = set(np.nonzero(masked.masked_lm_mask)[0].tolist())
        assert chosen in ({1, 2, 3}, {4, 5}, {1, 2, 3, 4, 5})


def _inputs(batches: list[Any]) -> list[list[list[int]]]:
    return [b["input_ids"].tolist() for b in batches]


def test_a_resumed_run_sees_the_same_masks(corpus) -> None:
    """Stop in the middle of epoch 1, resume with a fresh loader (a new process): the same
    masks as the uninterrupted run; epochs mask differently."""
    arguments = {"batch_size": 16, "shuffle": True, "shuffle_seed": 5}
    stream = DataStream(_masked(corpus, **arguments), None)
    for _ in range(12 + 5):  # 12 batches per epoch
        stream.next()
    position = stream.position()
    uninterrupted = _inputs([stream.next() for _ in range(10)])
    resumed = DataStream(_masked(corpus, **arguments), position)
    assert _inputs([resumed.next() for _ in range(10)]) == uninterrupted
    loader = _masked(corpus, **arguments)
    loader.sampler.set_epoch(0)
    first = next(iter(loader))
    loader.sampler.set_epoch(1)
    second = next(iter(loader))
    assert first["masked_lm_positions"].tolist() != second["masked_lm_positions"].tolist()


def test_masks_do_not_depend_on_the_order_workers_or_processes(corpus, monkeypatch) -> None:
    """The mask of a sample is a function of the seed, the epoch and the sample."""

    def by_row(loader: Any) -> dict[tuple[int, ...], list[int]]:
        found = {}
        for batch in loader:
            for i in range(len(batch["input_ids"])):
                original = batch["input_ids"][i].clone()
                chosen = int(batch["masked_lm_mask"][i].sum())
                positions = batch["masked_lm_positions"][i][:chosen].long()
                original[positions] = batch["labels"][i][:chosen]
                key = tuple(original.tolist() + batch["token_type_ids"][i].tolist())
                assert key not in found
                found[key] = batch["input_ids"][i].tolist()
        return found

    plain = by_row(_masked(corpus, batch_size=8, shuffle_seed=2))
    workers = by_row(_masked(corpus, batch_size=8, shuffle_seed=2, num_workers=2))
    assert workers == plain
    shuffled = _masked(corpus, batch_size=8, shuffle_seed=2, shuffle=True)
    shuffled.sampler.set_epoch(0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    shard = by_row(shuffled)
    assert shard
    assert all(plain[key] == ids for key, ids in shard.items())
    assert len(next(iter(shuffled))["input_ids"]) == 4  # rank 1's half of a global batch of 8


def test_disable_nsp_cuts_long_rows_and_nsp_refuses_them(corpus, tmp_path) -> None:
    short = _loader(
        "BertCSVDynamicMaskDataProcessor", data_dir=str(corpus["root"] / "csv"),
        vocab_file=str(corpus["root"] / "vocab.txt"), max_sequence_length=10,
        max_predictions_per_seq=3, batch_size=4, shuffle=False, disable_nsp=True,
    )  # fmt: skip
    batch = next(iter(short))
    assert set(batch) == {
        "input_ids",
        "attention_mask",
        "labels",
        "masked_lm_mask",
        "masked_lm_positions",
    }
    assert batch["input_ids"].shape == (4, 10)
    with_nsp = _loader(
        "BertCSVDynamicMaskDataProcessor", data_dir=str(corpus["root"] / "csv"),
        vocab_file=str(corpus["root"] / "vocab.txt"), max_sequence_length=10,
        max_predictions_per_seq=3, batch_size=4, shuffle=False,
    )  # fmt: skip
    with pytest.raises(TrainingError, match=r"part-00\.csv, row \d+: \d+ tokens, more than"):
        list(with_nsp)


def test_a_bad_row_is_named_with_its_file_and_row(corpus, tmp_path) -> None:
    folder = tmp_path / "bad"
    samples.write_masked_csv(folder, 6, 16, files=1)
    lines = (folder / "part-00.csv").read_text().splitlines()
    lines[4] = "\"['[CLS]', 'a'\",0"
    (folder / "part-00.csv").write_text("\n".join(lines) + "\n")
    loader = _loader(
        "BertCSVDynamicMaskDataProcessor", data_dir=str(folder),
        vocab_file=str(corpus["root"] / "vocab.txt"), max_sequence_length=16,
        max_predictions_per_seq=3, batch_size=6, shuffle=False,
    )  # fmt: skip
    with pytest.raises(TrainingError, match=r"part-00\.csv, row 4: 2 fields for the header's 3"):
        next(iter(loader))


def test_premasked_csv_rows_are_read_as_written(tmp_path) -> None:
    rows = samples.write_premasked_csv(tmp_path / "val", 10, 32, 5)
    batches = list(_loader("BertCSVDataProcessor", data_dir=str(tmp_path / "val"), batch_size=5))
    assert len(batches) == 2
    for number, row in enumerate(rows):
        batch, i = batches[number // 5], number % 5
        for name in ("input_ids", "attention_mask", "labels", "masked_lm_positions"):
            assert batch[name][i].tolist() == row[name]
        assert batch["masked_lm_mask"][i].tolist() == row["masked_lm_weights"]
    with open(tmp_path / "val" / "part-00.csv", newline="") as file:
        first = next(csv.DictReader(file))
    assert ast.literal_eval(first["input_ids"]) == rows[0]["input_ids"]


@pytest.mark.parametrize("vsl", [False, True])
def test_hdf5_samples_are_read_as_written_in_file_order(tmp_path, vsl) -> None:
    data, labels = samples.write_bert_hdf5(tmp_path / "h5", 10, 32, 5, vsl=vsl, files=3)
    loader = _loader(
        "BertHDF5DataProcessor", data_dir=str(tmp_path / "h5"), batch_size=5, use_vsl=vsl
    )
    batches = list(loader)
    names = ["input_ids", "attention_mask"] + (["attention_span", "position_ids"] if vsl else [])
    assert set(batches[0]) == {*names, "labels", "masked_lm_positions", "masked_lm_mask"}
    for row, name in enumerate(names):
        assert torch.cat([b[name] for b in batches]).numpy().tolist() == data[:, row].tolist()
    for row, name in enumerate(["labels", "masked_lm_positions", "masked_lm_mask"]):
        assert torch.cat([b[name] for b in batches]).numpy().tolist() == labels[:, row].tolist()
    shuffled = _loader(
        "BertHDF5DataProcessor",
        data_dir=str(tmp_path / "h5"),
        batch_size=10,
        shuffle=True,
        shuffle_seed=4,
    )
    order = torch.randperm(10, generator=torch.Generator().manual_seed(4))
    assert next(iter(shuffled))["input_ids"].tolist() == data[order.numpy(), 0].tolist()


def test_a_premasked_row_of_another_length_is_named(tmp_path) -> None:
    samples.write_premasked_csv(tmp_path / "val", 4, 16, 3)
    path = tmp_path / "val" / "part-00.csv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace("[", "[7, ", 1)  # row 3's input_ids one longer
    path.write_text("\n".join(lines) + "\n")
    loader = _loader("BertCSVDataProcessor", data_dir=str(tmp_path / "val"), batch_size=4)
    with pytest.raises(TrainingError, match=r"part-00\.csv, row 3: feature 'input_ids' has shape"):
        next(iter(loader))
