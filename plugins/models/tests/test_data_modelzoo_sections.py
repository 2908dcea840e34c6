"""Data sections of Model Zoo 2.10's decoder run files, as written, check and read batches.

One section of each key set found in the 67 decoder configs under ``models/nlp/*/configs`` (268
data sections), with spec 6.2's overrides only: ``data_dir`` -> files written by ``plugtrain
preprocess`` (bytes, msl 32), ``batch_size`` 4, ``num_workers`` 0, sinks 4 of id 511.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

import plugtrain
from plugtrain.cli import main
from plugtrain.config.validation.validate import plan_component
from plugtrain.discovery import loading as plugins

SECTIONS = """\
- {data_processor: GptHDF5MapDataProcessor, data_dir: ./shuffled/bloom_data_test/val/,
   shuffle: false, shuffle_seed: 1337, batch_size: 135, num_workers: 8, prefetch_factor: 10,
   persistent_workers: true}
- {data_processor: GptHDF5MapDataProcessor,
   data_dir: ./language/datasets/SlimPajama/train_shuffled_msl2048/, shuffle: false,
   shuffle_seed: 1, batch_size: 1920, use_worker_cache: false, num_workers: 8}
- {data_processor: GptHDF5MapDataProcessor,
   data_dir: ./datasets/mle_datasets/wiki_en_100k_gemma2_msl8k_train/, vocab_size: 256000,
   batch_size: 9, shuffle: true, shuffle_seed: 1337, num_workers: 8, prefetch_factor: 10,
   persistent_workers: true}
- {batch_size: 24, data_dir: ./datasets/mle_datasets/wiki_en_100k_gemma2_msl8k_train/,
   data_processor: GptHDF5MapDataProcessor, num_workers: 8, persistent_workers: true,
   prefetch_factor: 10, shuffle: true, shuffle_seed: 1337, vocab_size: 256000,
   data_transforms: [{name: add_sink_tokens, sink_token_id: 255999, num_sink_tokens: 512}]}
- {data_processor: GptHDF5DataProcessor,
   data_dir: [./language/datasets/pile_original/hdf5_dataset/train_shuffled_msl2048/0/,
              ./language/datasets/pile_original/hdf5_dataset/train_shuffled_msl2048/1/],
   shuffle: true, shuffle_seed: 0, batch_size: 120, num_workers: 1, prefetch_factor: 10,
   persistent_workers: true}
- {data_processor: GptHDF5DataProcessor, data_dir: ./wizardcoder_data_test/test,
   batch_size: 18, shuffle: false, num_workers: 8, prefetch_factor: 10,
   persistent_workers: true}
- {batch_size: 95, data_dir: ./language/datasets/SlimPajama/val_msl2048,
   data_processor: GptHDF5MapDataProcessor, persistent_workers: true, prefetch_factor: 10,
   shuffle: false, shuffle_seed: 1, use_worker_cache: false}
"""


def _overridden(section: dict[str, Any], data_dir: str) -> dict[str, Any]:
    """Spec 6.2's data overrides, nothing else."""
    written = section["data_dir"]
    section["data_dir"] = [data_dir] * len(written) if isinstance(written, list) else data_dir
    section.update(batch_size=4, num_workers=0)
    for transform in section.get("data_transforms", []):
        transform.update(num_sink_tokens=4, sink_token_id=511)
    return section


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("data") / "stdlib"
    arguments = ["stdlib", "--stdlib-corpus", "20000", "--max-seq-length", "32"]
    assert main(["preprocess", *arguments, "--samples-per-file", "100", "-o", str(out)]) == 0
    return str(out)


@pytest.mark.parametrize("index", range(len(yaml.safe_load(SECTIONS))))
def test_a_model_zoo_data_section_checks_and_reads(index: int, data_dir: str) -> None:
    section = _overridden(yaml.safe_load(SECTIONS)[index], data_dir)
    name = section.pop("data_processor")
    spec = plan_component(plugins.get_registry(), "dataloader", {name: section})
    batch = next(iter(plugtrain.resolve("dataloader", name)(**spec.call_arguments())))
    sinks = 4 if "data_transforms" in section else 0
    assert {k: tuple(v.shape) for k, v in batch.items()} == dict.fromkeys(
        ("input_ids", "attention_mask", "labels"), (4, 32 + sinks)
    )
