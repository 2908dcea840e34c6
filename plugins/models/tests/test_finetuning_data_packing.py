"""Packing that keeps documents apart, and the map processor's order over passes.

A VSL sample (``attention_span``, ``position_ids``) holding several documents gives, at each
document's positions, the logits of that document run alone: for every position embedding
the decoder has. ``GptHDF5MapDataProcessor`` iterated twice on its own (no ``set_epoch``)
reads epoch 0, then epoch 1, as Model Zoo's sampler does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch

from plugtrain_models.data.finetuning import Encoded, vsl_rows
from plugtrain_models.data.map_processor import gpt_hdf5_map_loader
from plugtrain_models.data.packing import first_fit
from plugtrain_models.families import build_decoder

V, MSL = 97, 40
POSITIONS = ["learned", "fixed", "rotary", "alibi", None]
"""Every position embedding the decoder implements (``relative`` is refused at check)."""


def _decoder(positions: str | None) -> Any:
    torch.manual_seed(0)
    keys = {
        "vocab_size": V,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_heads": 4,
        "filter_size": 64,
        "max_position_embeddings": 64,
        "position_embedding_type": positions,
        "dropout_rate": 0.0,
        "embedding_dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
    }
    if positions == "rotary":
        keys["rotary_dim"] = 8
    return build_decoder("gpt3", keys).eval()


def _documents() -> list[Encoded]:
    generator = torch.Generator().manual_seed(3)
    lengths = [9, 13, 7, 6]
    return [
        Encoded(torch.randint(0, V, (n,), generator=generator).tolist(), [0] + [1] * (n - 1))
        for n in lengths
    ]


@pytest.mark.parametrize("positions", POSITIONS)
def test_a_packed_sample_gives_each_documents_logits_alone(positions: str | None) -> None:
    model = _decoder(positions)
    documents = _documents()
    rows = torch.from_numpy(vsl_rows(documents, MSL, pad_id=0)).long()
    with torch.no_grad():
        packed, _ = model.model(rows[0:1], rows[4:5], rows[3:4])
        start = 0
        for number, document in enumerate(documents):
            alone, _ = model.model(torch.tensor([document.token_ids]))
            # the last document's final token is only a label: one position fewer
            n = len(document.token_ids) - (number == len(documents) - 1)
            # float32, same operations on the same values: equal up to reordering (~1e-6)
            torch.testing.assert_close(packed[0, start : start + n], alone[0, :n])
            start += n
        naive, _ = model.model(rows[0:1])  # one causal sequence: later documents differ
        assert not torch.allclose(naive[0, 9:22], packed[0, 9:22], atol=1e-3)


def test_first_fit_puts_each_item_in_the_earliest_bin_with_room() -> None:
    # 6 opens bin 0, 5 bin 1; 4 fills bin 0; 3 and 2 fill bin 1; the last 5 opens bin 2
    assert first_fit([6, 5, 4, 3, 2, 5], 10) == [[0, 2], [1, 3, 4], [5]]
    assert first_fit([], 10) == []
    with pytest.raises(ValueError, match="does not fit"):
        first_fit([11], 10)


def _write_samples(folder: Path, count: int) -> Path:
    folder.mkdir()
    data = np.zeros((count, 3, 4), dtype=np.int32)
    data[:, 0, 0] = np.arange(count)  # each sample's number in its first token
    data[:, 1] = 1
    with h5py.File(folder / "data-00000.h5", "w") as file:
        file.create_dataset("data", data=data)
        file.attrs["n_examples"] = count
    return folder


def _pass(loader: Any) -> list[list[int]]:
    return [batch["input_ids"][:, 0].tolist() for batch in loader]


def test_the_map_processor_iterated_twice_on_its_own_advances_the_epoch(tmp_path: Path) -> None:
    folder = _write_samples(tmp_path / "data", 10)
    loader = gpt_hdf5_map_loader(
        data_dir=str(folder), batch_size=4, shuffle=True, shuffle_seed=11, drop_last=True
    )
    first, second = _pass(loader), _pass(loader)
    epoch0 = torch.randperm(10, generator=torch.Generator().manual_seed(11)).tolist()
    epoch1 = torch.randperm(10, generator=torch.Generator().manual_seed(12)).tolist()
    stream = epoch0 + epoch1
    # drop_last: pass 1 yields the 2 batches that end in epoch 0; its 2 leftovers open pass 2
    assert first == [stream[0:4], stream[4:8]]
    assert second == [stream[8:12], stream[12:16], stream[16:20]]
    assert first != second
    loader.sampler.set_epoch(0)  # a trainer's set_epoch still chooses the epoch
    assert _pass(loader) == first


def test_the_map_processor_without_shuffle_carries_drop_last_leftovers(tmp_path: Path) -> None:
    loader = gpt_hdf5_map_loader(data_dir=str(_write_samples(tmp_path / "d", 5)), batch_size=2)
    assert [_pass(loader) for _ in range(3)] == [
        [[0, 1], [2, 3]],
        [[4, 0], [1, 2], [3, 4]],
        [[0, 1], [2, 3]],
    ]
