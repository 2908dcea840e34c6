"""One run of a preprocessing file: its settings, and the work on one batch of records.

:class:`ConfigRun` reads the records (in the main process) and turns a batch of them into
samples (:meth:`ConfigRun.job`), in the main process or in a worker process that built its own
:class:`ConfigRun` from the same file. A batch's result depends on its records only, so any
number of processes (and threads: each has its own encoder) makes the same samples.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import numpy as np

from plugtrain.errors import MissingDependencyError, TrainingError
from plugtrain_models.data.finetuning import Encoded, FinetuningEncoder, Skipped, Truncation
from plugtrain_models.data.preprocess_config import PreprocessConfig
from plugtrain_models.data.read_hooks import load_read_hook
from plugtrain_models.data.records import read_records, source_files
from plugtrain_models.data.sample_chunks import SampleBatch, padded_rows, sample_batch
from plugtrain_models.data.tokenizer_folder import CHATML_TEMPLATE, TokenizerFolder
from plugtrain_models.data.truncation import MODES

__all__ = ["BatchResult", "ConfigRun", "Record"]

Record = tuple[str, list[dict[str, Any]]]
"""``(where, semantic data array)``: a record as its read hook gives it, and where it is."""


@attrs.define
class BatchResult:
    """What a batch of records made.

    :ivar batch: the samples, as HDF5 chunks (fine-tuning without VSL, DPO).
    :ivar encoded: the samples still to be packed (fine-tuning with VSL).
    :ivar documents: each document's token ids (pre-training: packed in order later).
    :ivar counts: the batch's record counts (skipped, discarded, characters...).
    """

    batch: SampleBatch | None = None
    encoded: list[Encoded] = attrs.field(factory=list)
    documents: list[np.ndarray] = attrs.field(factory=list)
    counts: dict[str, int] = attrs.field(factory=dict)


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


def _delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What a counter gained (its keys all kept, zeros too)."""
    return {key: int(value) - int(before.get(key, 0)) for key, value in after.items()}


class ConfigRun:
    """One run's settings, its record counts, and the work on each batch of records."""

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
        self._local = threading.local()  # each thread its own encoder (and its counts)
        # Model Zoo: 1 where the loss is ignored
        self.inverted_rows = (1, 4) if config.mode == "dpo" else (1,)
        self.inverted = bool(processing.get("inverted_mask"))

    def absent_keys(self) -> list[str]:
        """``read_hook_kwargs`` keys (``prompt_key: question``) naming a field no record had."""
        return [
            f"{name} {value!r}"
            for name, value in self.hook_kwargs.items()
            if name.endswith("_key") and isinstance(value, str) and value not in self.keys_seen
        ]

    def records(self) -> Iterator[Record]:
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

    def batch(self, rows: np.ndarray) -> SampleBatch:
        """Samples ``[n, r, msl]`` as written: the mask inverted if asked, then compressed."""
        if self.inverted and len(rows):
            for row in self.inverted_rows:
                rows[:, row] = rows[:, row] == 0
        return sample_batch(rows, self.pad_id, self.eos_id)

    def job(self, records: list[Record]) -> BatchResult:
        """The samples (or documents) of a batch of records, by the run's mode."""
        if self.config.mode == "finetuning":
            return self._finetuning(records)
        if self.config.mode == "dpo":
            return self._dpo(records)
        return self._pretraining(records)

    def _finetuning_encoder(self) -> FinetuningEncoder:
        if getattr(self._local, "encoder", None) is None:
            processing, dataset = self.config.processing, self.config.dataset
            # Model Zoo: the tokenizer's sep token or "<|sep|>" by default; null: none.
            default_sep = self.tokenizer.special_tokens.get("sep_token", "<|sep|>")
            self._local.encoder = FinetuningEncoder(
                self.tokenizer,
                eos_id=self.eos_id,
                max_seq_length=self.msl,
                min_sequence_len=self.min_length,
                sep_token=dataset.get("sep_token", default_sep),
                end_of_turn_token=processing.get("end_of_turn_token"),
                truncation=_truncation(self.config),
                clean=self.clean,
                semantic_loss_weight=processing.get("semantic_loss_weight"),
                semantic_drop_mask=processing.get("semantic_drop_mask"),
            )
        encoder: FinetuningEncoder = self._local.encoder
        return encoder

    def _finetuning(self, records: list[Record]) -> BatchResult:
        encoder = self._finetuning_encoder()
        before = dict(encoder.stats)
        try:
            results = encoder.encode_many([semantic for _, semantic in records])
        except (ValueError, TrainingError):
            for where, semantic in records:  # again one by one, to name the record
                try:
                    encoder.encode(semantic)
                except (ValueError, TrainingError) as exc:
                    raise TrainingError(f"{where}: {exc}") from None
                except Skipped:
                    pass
            raise
        counts: Counter[str] = Counter()
        encoded: list[Encoded] = []
        for result in results:
            if isinstance(result, Skipped):
                counts[result.reason] += 1
            else:
                encoded.append(result)
        out = BatchResult(counts={**counts, **_delta(before, encoder.stats)})
        if self.use_vsl:
            out.encoded = encoded
        else:
            ids, masks = [e.token_ids for e in encoded], [e.loss_mask for e in encoded]
            out.batch = self.batch(padded_rows(ids, masks, self.msl, self.pad_id))
        return out

    def _dpo(self, records: list[Record]) -> BatchResult:
        from plugtrain_models.dpo.encoding import DpoEncoder

        if getattr(self._local, "encoder", None) is None:
            dataset = self.config.dataset
            self._local.encoder = DpoEncoder(
                self.tokenizer, eos_id=self.eos_id, pad_id=self.pad_id, max_seq_length=self.msl,
                max_prompt_length=int(dataset.get("max_prompt_length") or 512),
                response_delimiter=str(dataset.get("response_delimiter") or "<response>"),
                clean=self.clean,
            )  # fmt: skip
        encoder = self._local.encoder
        before = dict(encoder.stats)
        samples = []
        for where, semantic in records:
            try:
                rows = encoder.encode(semantic)
            except (ValueError, TrainingError) as exc:
                raise TrainingError(f"{where}: {exc}") from None
            if rows is not None:
                samples.append(rows)
        stacked = np.stack(samples) if samples else np.zeros((0, 6, self.msl), dtype=np.int32)
        return BatchResult(self.batch(stacked), counts=_delta(before, encoder.stats))

    def _pretraining(self, records: list[Record]) -> BatchResult:
        counts: Counter[str] = Counter(raw_chars_count=0, raw_bytes_count=0)
        texts = []
        for _where, semantic in records:
            parts = [p.get("text") or "" for turn in semantic for p in turn.get("content", [])]
            text = self.clean("".join(parts))
            counts["raw_chars_count"] += len(text)
            counts["raw_bytes_count"] += len(text.encode("utf-8"))
            if not text:
                counts["raw_docs_skipped"] += 1
                continue
            texts.append(text)
        documents = [np.asarray(ids, dtype=np.int32) for ids in self.tokenizer.encode_batch(texts)]
        return BatchResult(documents=documents, counts=dict(counts))
