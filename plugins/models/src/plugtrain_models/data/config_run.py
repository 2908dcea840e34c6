"""``plugtrain preprocess --config FILE.yaml``: Model Zoo's preprocessing file, run locally.

Reads the records of ``setup.data.source``, turns each into a semantic data array with the
read hook, encodes it (fine-tuning: prompt/completion or chat with its loss mask; pre-training:
text packed into sequences), optionally packs samples with VSL, shuffles, and writes the HDF5
files and ``data_params.json`` (its statistics under ``"post-process"``, as Model Zoo records
them) into ``setup.output_dir``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from plugtrain.errors import MissingDependencyError, TrainingError
from plugtrain_models.data.finetuning import (
    Encoded,
    FinetuningEncoder,
    Skipped,
    Truncation,
    pad_to_msl,
    vsl_rows,
)
from plugtrain_models.data.output_dir import fresh_output_dir
from plugtrain_models.data.packing import Packer, first_fit
from plugtrain_models.data.preprocess_config import PreprocessConfig, load_preprocess_config
from plugtrain_models.data.read_hooks import load_read_hook
from plugtrain_models.data.records import read_records, source_files
from plugtrain_models.data.tokenizer_folder import CHATML_TEMPLATE, TokenizerFolder
from plugtrain_models.data.truncation import MODES
from plugtrain_models.data.writer import SampleWriter

__all__ = ["run_config", "sample_stats"]

FEATURES = ["input_ids", "attention_mask", "labels"]
VSL_FEATURES = [*FEATURES, "attention_span", "position_ids"]
SAMPLES_PER_FILE = 4096
BATCH = 256  # records tokenized together


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def sample_stats(rows: np.ndarray, pad_id: int, eos_id: int) -> dict[str, int]:
    """Model Zoo's per-sample statistics (``get_data_stats``) of one written sample."""
    if rows.shape[0] == 6:  # a DPO sample: its chosen and its rejected sequence
        first, second = (
            sample_stats(rows[:3], pad_id, eos_id),
            sample_stats(rows[3:], pad_id, eos_id),
        )
        return {k: first[k] + second[k] if k != "n_examples" else 1 for k in first}
    inputs, msl = rows[0], rows.shape[1]
    valid = int(rows[1].sum())
    return {
        "num_pad_tokens": int((inputs == pad_id).sum()),
        "non_pad_tokens": int(((inputs != eos_id) & (inputs != pad_id)).sum()),
        "num_tokens": int(msl),
        "loss_valid_tokens": valid,
        "num_masked_tokens": int(msl - valid),
        "n_examples": 1,
    }


def _cleaner(config: PreprocessConfig) -> Callable[[str], str]:
    processing = config.processing
    if processing.get("use_ftfy", True) is False:
        return str
    try:
        import ftfy
    except ImportError as exc:
        message = (
            f"{config.where('processing', 'use_ftfy')}: use_ftfy (true by default, as in Model "
            "Zoo) needs the ftfy package: pip install 'plugtrain-models[preprocess]', or write "
            "use_ftfy: false"
        )
        raise MissingDependencyError(message) from exc
    normalization = processing.get("ftfy_normalizer", "NFC")
    return lambda text: ftfy.fix_text(text, normalization=normalization)


def _ids(config: PreprocessConfig, tokenizer: TokenizerFolder) -> tuple[int, int]:
    """Model Zoo's EOS and pad ids: the tokenizer's, overridden by ``eos_id`` / ``pad_id``."""
    processing = config.processing
    eos, pad = tokenizer.token_id("eos_token"), tokenizer.token_id("pad_token")
    pad = eos if pad is None else pad
    if processing.get("eos_id") is not None:
        eos = pad = int(processing["eos_id"])
    if processing.get("pad_id") is not None:
        pad = int(processing["pad_id"])
        eos = pad if eos is None else eos
    if eos is None:
        key = (
            "huggingface_tokenizer"
            if processing.get("huggingface_tokenizer")
            else "custom_tokenizer"
        )
        raise config.issue(
            "processing", key, "the tokenizer has no eos_token: give processing.eos_id"
        )
    return eos, eos if pad is None else pad


def _truncation(config: PreprocessConfig) -> Truncation | None:
    value = config.dataset.get("truncate_to_msl")
    if not value:
        return None
    # The shipped summarization file writes truncation_mode, which Model Zoo does not read
    # (it falls back to keep_end); here it means what it says.
    mode = value.get("prompt_truncation_mode") or value.get("truncation_mode") or "keep_end"
    if mode not in MODES:
        key = "prompt_truncation_mode" if "prompt_truncation_mode" in value else "truncation_mode"
        message = f"must be one of {', '.join(MODES)}"
        raise config.issue("dataset", f"truncate_to_msl.{key}", message)
    return Truncation(mode, value.get("max_turn_length"))


class _Run:
    """One run's state: the settings, the counters, the samples made."""

    def __init__(self, config: PreprocessConfig) -> None:
        self.config = config
        processing, dataset = config.processing, config.dataset
        self.tokenizer = TokenizerFolder(config.tokenizer, dataset.get("chat_template"))
        if self.tokenizer.chat_template is None:  # Model Zoo installs ChatML then
            self.tokenizer.chat_template = CHATML_TEMPLATE
        self.eos_id, self.pad_id = _ids(config, self.tokenizer)
        self.msl = int(processing.get("max_seq_length") or 2048)
        self.min_length = int(processing.get("min_sequence_len") or 10)
        self.use_vsl = bool(dataset.get("use_vsl"))
        self.clean = _cleaner(config)
        try:
            self.hook = load_read_hook(str(processing["read_hook"]))
        except ValueError as exc:
            raise config.issue("processing", "read_hook", str(exc)) from None
        self.hook_kwargs = dict(processing["read_hook_kwargs"])
        self.counts: Counter[str] = Counter()
        self.keys_seen: set[str] = set()

    def absent_keys(self) -> list[str]:
        """``read_hook_kwargs`` keys (``prompt_key: question``) naming a field no record had."""
        return [
            f"{name} {value!r}"
            for name, value in self.hook_kwargs.items()
            if name.endswith("_key") and isinstance(value, str) and value not in self.keys_seen
        ]

    def records(self) -> Iterator[tuple[str, list[dict[str, Any]]]]:
        """``(where, semantic data array)`` of each record."""
        skip = bool(self.config.processing.get("UNSAFE_skip_jsonl_decoding_errors"))
        source = str(self.config.setup["data"]["source"])
        for where, record in read_records(source_files(source), skip):
            if not isinstance(record, Mapping):
                raise TrainingError(f"{where}: a record must be a JSON object")
            self.counts["total_raw_docs"] += 1
            if len(self.keys_seen) < 1000:
                self.keys_seen.update(k for k in record if isinstance(k, str))
            try:
                semantic = self.hook(record, **self.hook_kwargs)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise TrainingError(f"{where}: the read hook failed: {exc}") from None
            yield where, semantic

    def finetuning(self) -> list[np.ndarray]:
        """The samples of a fine-tuning run (padded, or VSL-packed)."""
        processing, dataset = self.config.processing, self.config.dataset
        # Model Zoo: the tokenizer's sep token or "<|sep|>" by default; null: no separator.
        default_sep = self.tokenizer.special_tokens.get("sep_token", "<|sep|>")
        sep = dataset.get("sep_token", default_sep)
        encoder = FinetuningEncoder(
            self.tokenizer,
            eos_id=self.eos_id,
            max_seq_length=self.msl,
            min_sequence_len=self.min_length,
            sep_token=sep,
            end_of_turn_token=processing.get("end_of_turn_token"),
            truncation=_truncation(self.config),
            clean=self.clean,
            semantic_loss_weight=processing.get("semantic_loss_weight"),
            semantic_drop_mask=processing.get("semantic_drop_mask"),
        )
        encoded: list[Encoded] = []
        for chunk in _chunks(self.records(), BATCH):
            try:
                results = encoder.encode_many([semantic for _, semantic in chunk])
            except (ValueError, TrainingError):
                for where, semantic in chunk:  # again one by one, to name the record
                    try:
                        encoder.encode(semantic)
                    except (ValueError, TrainingError) as exc:
                        raise TrainingError(f"{where}: {exc}") from None
                    except Skipped:
                        pass
                raise
            for result in results:
                if isinstance(result, Skipped):
                    self.counts[result.reason] += 1
                else:
                    encoded.append(result)
        self.counts.update(encoder.stats)
        if not self.use_vsl:
            return [pad_to_msl(e, self.msl, self.pad_id) for e in encoded]
        return self._vsl(encoded)

    def dpo(self) -> list[np.ndarray]:
        """The samples of a DPO run (:mod:`plugtrain_models.dpo.encoding`)."""
        from plugtrain_models.dpo.encoding import DpoEncoder

        dataset = self.config.dataset
        encoder = DpoEncoder(
            self.tokenizer, eos_id=self.eos_id, pad_id=self.pad_id, max_seq_length=self.msl,
            max_prompt_length=int(dataset.get("max_prompt_length") or 512),
            response_delimiter=str(dataset.get("response_delimiter") or "<response>"),
            clean=self.clean,
        )  # fmt: skip
        samples = []
        for where, semantic in self.records():
            try:
                rows = encoder.encode(semantic)
            except (ValueError, TrainingError) as exc:
                raise TrainingError(f"{where}: {exc}") from None
            if rows is not None:
                samples.append(rows)
        self.counts.update(encoder.stats)
        return samples

    def _vsl(self, encoded: list[Encoded]) -> list[np.ndarray]:
        self.counts["num_sequences_before_packing"] += len(encoded)
        bins = first_fit([len(e.token_ids) for e in encoded], self.msl)
        return [vsl_rows([encoded[i] for i in b], self.msl, self.pad_id) for b in bins]

    def pretraining(self) -> list[np.ndarray]:
        """The samples of a pre-training run: documents + EOS, packed (or VSL-packed)."""
        pack = self.config.dataset.get("pack_sequences", True) is not False
        packer = Packer(self.msl, self.eos_id, self.pad_id, pack=pack,
                        min_sequence_length=self.min_length)  # fmt: skip
        samples: list[np.ndarray] = []
        documents: list[Encoded] = []
        for _where, semantic in self.records():
            parts = [p.get("text") or "" for turn in semantic for p in turn.get("content", [])]
            text = self.clean("".join(parts))
            self.counts["raw_chars_count"] += len(text)
            self.counts["raw_bytes_count"] += len(text.encode("utf-8"))
            if not text:
                self.counts["raw_docs_skipped"] += 1
                continue
            tokens = self.tokenizer.encode(text)[0]
            if not self.use_vsl:
                samples.extend(packer.add(tokens))
                continue
            stream = [*tokens, self.eos_id]
            for start in range(0, len(stream), self.msl):  # a long document: pieces of msl
                piece = stream[start : start + self.msl]
                if len(piece) >= max(2, self.min_length):
                    documents.append(Encoded(piece, [0] + [1] * (len(piece) - 1)))
        if self.use_vsl:
            return self._vsl(documents)
        samples.extend(packer.finish())
        return samples


def _post_process(counts: Counter[str], samples: list[np.ndarray], run: _Run) -> dict[str, Any]:
    stats: Counter[str] = Counter()
    for rows in samples:
        stats.update(sample_stats(rows, run.pad_id, run.eos_id))
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
    run = _Run(config)
    with fresh_output_dir(output):
        make = {"finetuning": run.finetuning, "dpo": run.dpo}.get(config.mode, run.pretraining)
        samples = make()
        if not samples:
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
        if processing.get("inverted_mask"):  # Model Zoo: 1 where the loss is ignored
            masks = (1, 4) if config.mode == "dpo" else (1,)
            for rows in samples:
                for row in masks:
                    rows[row] = rows[row] == 0
        if processing.get("shuffle"):
            order = np.random.default_rng(processing.get("shuffle_seed") or 0)
            samples = [samples[i] for i in order.permutation(len(samples))]
        writer = SampleWriter(output, run.msl, SAMPLES_PER_FILE)
        writer.add(samples)
        writer.close()
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
            "post-process": _post_process(run.counts, samples, run),
        }
        (output / "data_params.json").write_text(json.dumps(params, indent=4) + "\n", "utf-8")
    post = params["post-process"]
    out.write(
        f"{output}: {post['n_examples']} samples of {run.msl} tokens in {len(writer.files)} "
        f"files ({post['loss_valid_tokens']} loss tokens; skipped {post['raw_docs_skipped']}, "
        f"discarded {post['discarded_files']} of {post['total_raw_docs']} records)\n"
    )
    return params
