"""``plugtrain preprocess --config FILE.yaml``: Model Zoo's preprocessing file, run locally.

Reads the records of ``setup.data.source``, turns each into a semantic data array with the
read hook, encodes batches of them (fine-tuning: prompt/completion or chat with its loss mask;
pre-training: text packed into sequences) in this process or in ``setup.processes`` worker
processes, optionally packs samples with VSL, shuffles, and writes the HDF5 files as they fill
and ``data_params.json`` (its statistics under ``"post-process"``, as Model Zoo records them)
into ``setup.output_dir``. Any number of processes writes the same files.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from plugtrain.errors import TrainingError
from plugtrain_models.data.config_jobs import BatchResult, ConfigRun, Record
from plugtrain_models.data.finetuning import Encoded, vsl_rows
from plugtrain_models.data.output_dir import fresh_output_dir
from plugtrain_models.data.packing import Packer, first_fit
from plugtrain_models.data.parallel import ordered_map
from plugtrain_models.data.preprocess_config import PreprocessConfig, load_preprocess_config
from plugtrain_models.data.sample_chunks import Chunk, SampleBatch
from plugtrain_models.data.writer import ChunkWriter

__all__ = ["run_config"]

FEATURES = ["input_ids", "attention_mask", "labels"]
VSL_FEATURES = [*FEATURES, "attention_span", "position_ids"]
SAMPLES_PER_FILE = 4096
BATCH = 256  # records tokenized together, the unit of work of a process


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _job_of(path: str) -> Callable[[list[Record]], BatchResult]:
    """The batch work of the file ``path`` (what each worker process builds)."""
    return ConfigRun(load_preprocess_config(path)).job


def _processes(config: PreprocessConfig) -> int:
    value = config.setup.get("processes")
    if value is None:
        return 1
    if int(value) < 1:
        raise config.issue("setup", "processes", "must be at least 1")
    return int(value)


def _vsl(run: ConfigRun, encoded: list[Encoded]) -> Iterator[SampleBatch]:
    run.counts["num_sequences_before_packing"] += len(encoded)
    bins = first_fit([len(e.token_ids) for e in encoded], run.msl)
    for start in range(0, len(bins), BATCH):
        rows = [
            vsl_rows([encoded[i] for i in b], run.msl, run.pad_id)
            for b in bins[start : start + BATCH]
        ]
        yield run.batch(np.stack(rows))


def _pieces(run: ConfigRun, documents: list[np.ndarray]) -> Iterator[Encoded]:
    """VSL pre-training: each document + EOS in pieces of at most msl (short ones dropped)."""
    for tokens in documents:
        stream = np.append(tokens, np.int32(run.eos_id)).astype(np.int32)
        for start in range(0, len(stream), run.msl):  # a long document: pieces of msl
            piece = stream[start : start + run.msl]
            if len(piece) >= max(2, run.min_length):
                mask = np.ones(len(piece), dtype=np.int32)
                mask[0] = 0
                yield Encoded(piece, mask)


def _sample_batches(run: ConfigRun, path: str, processes: int) -> Iterator[SampleBatch]:
    """The run's samples, batch by batch, in the order they are written."""
    batches = _chunks(run.records(), BATCH)
    results = ordered_map(run.job, _job_of, (path,), batches, processes)
    mode = run.config.mode
    packed: list[Encoded] = []
    pack = run.config.dataset.get("pack_sequences", True) is not False
    packer = Packer(run.msl, run.eos_id, run.pad_id, pack=pack,
                    min_sequence_length=run.min_length)  # fmt: skip
    for result in results:
        run.counts.update(result.counts)
        if result.batch is not None:
            yield result.batch
        elif mode == "finetuning":
            packed.extend(result.encoded)
        elif run.use_vsl:
            packed.extend(_pieces(run, result.documents))
        else:
            yield run.batch(packer.add_many(result.documents))
    if run.use_vsl and mode != "dpo":
        yield from _vsl(run, packed)
    elif mode not in ("finetuning", "dpo"):  # pre-training: the last, partial sample
        yield run.batch(packer.add_many([], finish=True))


def _write(
    run: ConfigRun, path: str, output: Path, processes: int
) -> tuple[Counter[str], ChunkWriter]:
    """Write the samples as they come (all of them first when shuffled); their statistics."""
    processing = run.config.processing
    shuffle = bool(processing.get("shuffle"))
    writer = ChunkWriter(output, SAMPLES_PER_FILE)
    stats: Counter[str] = Counter()
    kept: list[Chunk] = []
    shape = (3, run.msl)
    for batch in _sample_batches(run, path, processes):
        stats.update(batch.stats)
        shape = batch.shape
        if shuffle:
            kept.extend(batch.chunks)
        else:
            writer.add(batch.chunks, shape)
    if shuffle:
        order = np.random.default_rng(processing.get("shuffle_seed") or 0)
        writer.add((kept[i] for i in order.permutation(len(kept))), shape)
    writer.close()
    return stats, writer


def _post_process(counts: Counter[str], samples: Counter[str]) -> dict[str, Any]:
    """Model Zoo's ``post-process`` statistics: the samples' sums and the record counts."""
    stats: Counter[str] = Counter(samples)
    stats.update(counts)
    stats["discarded_files"] += 0
    stats["raw_docs_skipped"] += 0
    stats["processed_files"] = stats["total_raw_docs"]
    stats["successful_files"] = (
        stats["total_raw_docs"] - stats["discarded_files"] - stats["raw_docs_skipped"]
    )
    result: dict[str, Any] = dict(stats)
    examples = stats["n_examples"]
    for name in ("chars", "bytes"):
        average = -(-stats[f"raw_{name}_count"] // examples) if examples else 0
        result[f"average_{name}_per_sequence"] = average
    if stats.get("num_sequences_before_packing"):
        result["vsl_packing_factor"] = round(stats["num_sequences_before_packing"] / examples, 2)
    return dict(sorted(result.items()))


def _plain(value: Any) -> Any:
    """The YAML values as plain JSON data."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def run_config(path: str, out: TextIO, err: TextIO) -> dict[str, Any]:
    """Run the preprocessing file ``path``; returns what ``data_params.json`` holds.

    :raises plugtrain.errors.ConfigError: the file has problems (each at ``file:line:column``).
    :raises TrainingError: the data or the tokenizer cannot be used (the output folder is
        removed again when this run created it).
    """
    config = load_preprocess_config(path)
    for where, key, why in config.no_effect:
        err.write(f"plugtrain preprocess: {where}: {key} has no effect here: {why}\n")
    output = Path(str(config.setup.get("output_dir") or "./output/"))
    processes = _processes(config)
    run = ConfigRun(config)
    with fresh_output_dir(output):
        stats, writer = _write(run, path, output, processes)
        if not writer.samples:
            message = (
                f"{config.setup['data']['source']}: no sample made "
                f"({dict(run.counts)}; max_seq_length {run.msl}, min_sequence_len "
                f"{run.min_length})"
            )
            absent = run.absent_keys()
            if absent and run.counts["total_raw_docs"]:
                fields = ", ".join(sorted(run.keys_seen)[:20]) or "none"
                message += (
                    f": read_hook_kwargs {', '.join(absent)} is in no record (the records' "
                    f"fields: {fields})"
                )
            raise TrainingError(message)
        processing = config.processing
        features = VSL_FEATURES if run.use_vsl else FEATURES
        if config.mode == "dpo":
            from plugtrain_models.dpo.schemas import DPO_FEATURES

            features = list(DPO_FEATURES)
        params = {
            "setup": _plain(config.setup),
            "processing": {
                **_plain(processing),
                "eos_id": run.eos_id,
                "pad_id": run.pad_id,
                "vocab_size": run.tokenizer.vocab_size,
                "features": features,
            },
            "dataset": _plain(config.dataset),
            "features": features,
            # also at the top, where the flag form writes them (plugtrain's own readers look)
            "vocab_size": run.tokenizer.vocab_size,
            "eos_id": run.eos_id,
            "pad_id": run.pad_id,
            "max_seq_length": run.msl,
            "post-process": _post_process(run.counts, stats),
        }
        (output / "data_params.json").write_text(json.dumps(params, indent=4) + "\n", "utf-8")
    post = params["post-process"]
    out.write(
        f"{output}: {post['n_examples']} samples of {run.msl} tokens in {len(writer.files)} "
        f"files ({post['loss_valid_tokens']} loss tokens; skipped {post['raw_docs_skipped']}, "
        f"discarded {post['discarded_files']} of {post['total_raw_docs']} records)\n"
    )
    return params
