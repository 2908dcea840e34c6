"""Argument schemas of the BERT-family data processors (torch-free, h5py-free).

The keys and defaults are Model Zoo 2.10's. ``plugtrain check`` reports a data folder or a
vocabulary file that does not exist at its line ("Path X does not exist."), after expanding
``$MODELZOO_ROOT`` from the environment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_models.encoder_data.schemas_common import (
    DEPRECATED,
    NO_BUFFER,
    LoadingArgs,
    bucket_problems,
    file_problems,
    folder_problems,
)

__all__ = [
    "BertCSVArgs",
    "BertDynamicMaskArgs",
    "BertHDF5Args",
    "BertSumArgs",
    "TokenClassifierArgs",
]

EXCLUDED = ["[CLS]", "[SEP]", "[PAD]", "[MASK]"]

_CSV_DEPRECATED = (
    "vocab_size", "vocab_file", "whole_word_masking", "max_predictions_per_seq", "do_lower",
    "masked_lm_prob", "max_sequence_length", "max_position_embeddings",
)  # fmt: skip

DATA_DIR_HELP = "folder(s) of CSV files listed in their meta.dat (FILENAME COUNT per line)"


@attrs.frozen
class BertDynamicMaskArgs(LoadingArgs):
    """Model Zoo's BertCSVDynamicMaskDataProcessor: BERT pretraining rows masked in the loader.

    CSV columns ``tokens`` (a list literal of WordPiece tokens), ``segment_ids`` and
    ``is_random_next``. Each sample is masked as Model Zoo's ``create_masked_lm_predictions``
    does, with a ``random.Random`` of its own seeded from ``shuffle_seed``, the epoch and its
    index, so a resumed run sees the same masks. Model Zoo takes ``disable_nsp`` from the model
    section; here the data section says it.
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "vocab_size": DEPRECATED,
        "num_examples": DEPRECATED,
        "steps": DEPRECATED,
        "whole_word_masking": DEPRECATED + " (mask_whole_word is the key)",
        "shuffle_buffer": NO_BUFFER,
    }

    data_dir: str | list[str] = arg(help=DATA_DIR_HELP)
    vocab_file: str = arg(help="vocabulary: one token per line, the id is the line number")
    max_sequence_length: int = arg(help="tokens per sample (padded with input_pad_id)", gt=0)
    max_predictions_per_seq: int = arg(help="most masked positions per sample", gt=0)
    masked_lm_prob: float = arg(0.15, help="fraction of the tokens to predict", ge=0, le=1)
    mask_whole_word: bool = arg(False, help="mask every piece of a selected word")
    do_lower: bool = arg(False, help="lower-case the tokens and the vocabulary")
    disable_nsp: bool = arg(
        False,
        help="no next-sentence features, and rows longer than max_sequence_length are cut "
        "(Model Zoo copies it from the model section)",
    )
    dynamic_mlm_scale: bool = arg(
        False, help="add mlm_loss_scale = batch_size / masked positions of the batch"
    )
    buckets: list[int] | None = arg(None, help="length bucketing (not supported: null)")
    oov_token: str = arg("[UNK]", help="the vocabulary's unknown token")
    mask_token: str = arg("[MASK]", help="the token a masked position becomes")
    document_separator_token: str = arg("[SEP]", help="the separator token")
    exclude_from_masking: list[str] = arg(list(EXCLUDED), help="tokens never masked")
    gather_mlm_labels: bool = arg(
        True,
        help="labels, masked_lm_mask and masked_lm_positions at the masked positions "
        "[max_predictions_per_seq]; false: labels and masked_lm_mask over the sequence",
    )
    labels_pad_id: int = arg(0, help="labels' padding")
    input_pad_id: int = arg(0, help="input_ids' padding")
    attn_mask_pad_id: int = arg(0, help="attention_mask's padding")
    segment_pad_id: int = arg(0, help="token_type_ids' padding")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The files exist; no bucketing."""
        yield from folder_problems(arguments, "data_dir")
        yield from file_problems(arguments, "vocab_file")
        yield from bucket_problems(arguments)


@attrs.frozen
class BertCSVArgs(LoadingArgs):
    """Model Zoo's BertCSVDataProcessor: pre-masked rows (ESM-2's validation data).

    CSV columns as list literals: ``input_ids``, ``attention_mask``, ``labels`` (required),
    ``masked_lm_positions``, ``masked_lm_weights`` (read as ``masked_lm_mask``), and without
    ``disable_nsp`` ``token_type_ids`` and ``next_sentence_label`` when the files have them.
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(_CSV_DEPRECATED, DEPRECATED),
        "shuffle_buffer": NO_BUFFER,
    }

    data_dir: str | list[str] = arg(help=DATA_DIR_HELP)
    shuffle: bool = arg(False, help="shuffle the samples each epoch")
    prefetch_factor: int | None = arg(2, help="batches each worker loads ahead", gt=0)
    persistent_workers: bool = arg(False, help="keep the workers between epochs")
    disable_nsp: bool = arg(
        False, help="leave out token_type_ids and next_sentence_label (Model Zoo: the model's)"
    )
    dynamic_mlm_scale: bool = arg(
        False, help="add mlm_loss_scale = batch_size / masked positions of the batch"
    )
    buckets: list[int] | None = arg(None, help="length bucketing (not supported: null)")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The folders exist; no bucketing."""
        yield from folder_problems(arguments, "data_dir")
        yield from bucket_problems(arguments)


@attrs.frozen
class BertHDF5Args(LoadingArgs):
    """Model Zoo's BertHDF5DataProcessor: masked samples in HDF5 files (ESM-2's training data).

    Each ``*.h5`` file holds ``data`` ``[N, 2, S]`` (input_ids, attention_mask; ``[N, 4, S]``
    adds attention_span and position_ids, read with ``use_vsl``) and ``labels``: ``[N, 3, P]``
    (labels, masked_lm_positions, masked_lm_mask) when the folder's ``data_params.json`` says
    ``dataset: {training_objective: mlm, mlm_with_gather: true}``, else ``[N, 1, S]``.
    Read by index as GptHDF5MapDataProcessor: with ``shuffle``, epoch e is
    ``torch.randperm(N)`` seeded with ``shuffle_seed + e``; with ``drop_last`` an incomplete
    last batch opens the next epoch.
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "vocab_size": DEPRECATED,
        "use_worker_cache": "Cerebras appliance only (caches files on worker nodes)",
        "shuffle_buffer": NO_BUFFER,
    }

    data_dir: str | list[str] | None = arg(None, help="folder(s) of *.h5 files, pooled")
    mixture: list[dict[str, Any]] | None = arg(None, help="weighted data sets (not supported)")
    shuffle: bool = arg(False, help="permute the samples each epoch")
    shuffle_seed: int = arg(0, help="epoch e's permutation is seeded with shuffle_seed + e", ge=0)
    max_sequence_length: int | None = arg(
        None, help="only for corpus files, which BERT's masked samples never are: null"
    )
    data_subset: str | None = arg(None, help="fractions of the samples, e.g. '0.0-0.5,0.7-1.0'")
    num_samples: int | None = arg(None, help="samples per epoch (repeats or a part)", gt=0)
    pad_last: bool = arg(False, help="pad a short last batch with zero rows (drop_last false)")
    sort_files: bool = arg(True, help="order the files by path")
    use_vsl: bool = arg(False, help="also read attention_span and position_ids (data of 4 rows)")
    dataset_map_fn: Any = arg(None, help="a per-sample function (Python only; not supported)")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """One data folder that exists; nothing unsupported."""
        if arguments["data_dir"] is None or arguments["mixture"] is not None:
            yield about(("data_dir", "mixture"), "give data_dir (mixture is not supported)")
        if arguments["dataset_map_fn"] is not None:
            yield about("dataset_map_fn", "dataset_map_fn is not supported (it takes Python code)")
        if arguments["max_sequence_length"] is not None:
            message = "BERT's HDF5 files hold samples, which carry their length: leave it null"
            yield about("max_sequence_length", message)
        yield from folder_problems(arguments, "data_dir")


@attrs.frozen
class TokenClassifierArgs(LoadingArgs):
    """Model Zoo's BertTokenClassifierDataProcessor: NER rows (``tokens``, ``labels``).

    CSV columns ``tokens`` and ``labels``, space-separated, one label per token; the labels
    map to ids through ``label_vocab_file`` (null: the data folder's ``label2id.json``, which
    Model Zoo's NER preprocessing writes beside the CSV files). ``loss_mask`` is all ones with
    ``include_padding_in_loss``, else the attention mask (Model Zoo copies both keys from the
    model section; here the data section says them).
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "mask_whole_word": "unused by this processor in Model Zoo too",
        "shuffle_buffer": NO_BUFFER,
    }

    data_dir: str | list[str] = arg(help=DATA_DIR_HELP)
    vocab_file: str = arg(help="vocabulary: one token per line, the id is the line number")
    max_sequence_length: int = arg(help="tokens per sample (padded)", gt=0)
    label_vocab_file: str | None = arg(
        None, help="JSON {label: id} (null: label2id.json in the first data folder)"
    )
    do_lower: bool = arg(False, help="lower-case the tokens and the vocabulary")
    include_padding_in_loss: bool = arg(False, help="loss_mask all ones (else the tokens')")
    labels_pad_id: int | None = arg(None, help="labels' padding (null: [PAD]'s id)", ge=0)
    input_pad_id: int | None = arg(None, help="input_ids' padding (null: [PAD]'s id)", ge=0)
    attn_mask_pad_id: int | None = arg(None, help="attention_mask's padding (null: [PAD]'s id)")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The files exist."""
        yield from folder_problems(arguments, "data_dir")
        yield from file_problems(arguments, "vocab_file", "label_vocab_file")


@attrs.frozen
class BertSumArgs(LoadingArgs):
    """Model Zoo's BertSumCSVDataProcessor: extractive summarization rows.

    CSV columns ``input_token_ids``, ``labels``, ``segment_ids``, ``cls_indices`` (list
    literals of ids), each padded with the pad id to its length (``max_sequence_length`` or
    ``max_cls_tokens``); ``attention_mask`` = ids != pad, ``cls_weights`` = cls_indices != pad.
    The pad id is ``pad_id``, else ``[PAD]``'s id in ``vocab_file``, else 0 (Model Zoo reads
    ``vocab_file`` from the model section).
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "mask_whole_word": "unused by this processor in Model Zoo too",
        "do_lower": "only lower-cases the [PAD] lookup in Model Zoo; ids are read as written",
        "shuffle_buffer": NO_BUFFER,
    }

    data_dir: str | list[str] = arg(help=DATA_DIR_HELP)
    max_sequence_length: int = arg(help="tokens per sample (padded)", gt=0)
    max_cls_tokens: int = arg(help="sentences ([CLS] positions) per sample (padded)", gt=0)
    vocab_file: str | None = arg(None, help="vocabulary whose [PAD] id pads (null: pad_id or 0)")
    pad_id: int | None = arg(None, help="the padding id (null: [PAD]'s id, else 0)", ge=0)

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The files exist."""
        yield from folder_problems(arguments, "data_dir")
        yield from file_problems(arguments, "vocab_file")
