"""Argument schemas of the GLUE, DPR, T5 and transformer data processors (torch-free).

The keys and defaults are Model Zoo 2.10's; files and folders a section names must exist at
``plugtrain check``, after expanding ``$MODELZOO_ROOT`` from the environment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.schema import Problem, arg
from plugtrain_models.encoder_data.paths import path_problems
from plugtrain_models.encoder_data.schemas_common import (
    DEPRECATED,
    NO_BUFFER,
    LoadingArgs,
    bucket_problems,
    file_problems,
    folder_problems,
)

__all__ = ["DPRArgs", "MNLIArgs", "SST2Args", "T5Args", "TransformerArgs"]

DPR_FEATURES = [
    ["questions_input_ids", "questions_attention_mask", "questions_token_type_ids"],
    ["ctx_input_ids", "ctx_attention_mask", "ctx_token_type_ids"],
]
"""The rows of ``data_0`` and ``data_1`` when ``data_params.json`` does not name them."""


@attrs.frozen
class _GlueArgs(LoadingArgs):
    ignored_arguments: ClassVar[Mapping[str, str]] = {"shuffle_buffer": NO_BUFFER}

    is_training: bool = arg(help="read the training split (else the evaluation split(s))")
    data_dir: str = arg(help="the folder of the task's GLUE .tsv files")
    vocab_file: str = arg(help="WordPiece vocabulary: one token per line")
    max_sequence_length: int = arg(help="tokens per sample, [CLS] and [SEP] included", gt=2)
    do_lower: bool = arg(False, help="lower-case the text and the vocabulary")
    labels_pad_id: int = arg(0, help="unused (labels are one per sample), as in Model Zoo")
    input_pad_id: int = arg(0, help="input_ids' padding")
    attn_mask_pad_id: int = arg(0, help="attention_mask's padding")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The folder and the vocabulary exist."""
        yield from folder_problems(arguments, "data_dir")
        yield from file_problems(arguments, "vocab_file")


@attrs.frozen
class MNLIArgs(_GlueArgs):
    """Model Zoo's MNLIDataProcessor: GLUE MNLI sentence pairs.

    ``train.tsv`` when training, else ``dev_matched.tsv`` then ``dev_mismatched.tsv`` (whose
    batches add ``is_matched`` and ``is_mismatched``); columns ``sentence1``, ``sentence2``,
    ``gold_label`` by the header. Labels as Model Zoo numbers them: entailment 0, neutral 1,
    contradiction 2. ``input_ids`` are ``[CLS] a [SEP] b [SEP]`` (Model Zoo's FullTokenizer,
    the longer text cut first), ``token_type_ids`` 1 on ``b [SEP]``.
    """


@attrs.frozen
class SST2Args(_GlueArgs):
    """Model Zoo's SST2DataProcessor: GLUE SST-2 sentences.

    ``train.tsv`` when training, else ``dev.tsv``, with the header ``sentence<TAB>label``;
    ``input_ids`` are ``[CLS] text [SEP]`` (Model Zoo's FullTokenizer), ``labels`` the label.
    """


@attrs.frozen
class DPRArgs(LoadingArgs):
    """Model Zoo's DPRHDF5DataProcessor: questions with their contexts, streamed from HDF5.

    Each ``*.h5`` file holds ``data_0`` ``[N, 3, S]`` (the question's ids, mask, types) and
    ``data_1`` ``[N, 3, C, S]`` (its C contexts, the positive first), with the attribute
    ``n_examples``; ``data_params.json`` may name the rows (``data_0_features``,
    ``data_1_features``). Files are read in order as GptHDF5DataProcessor reads them (rank r
    of W reads files[r::W]; with ``shuffle``, a buffer of ``shuffle_buffer`` samples). Each
    batch adds ``labels = arange(B)·C`` (the positive context's column) and
    ``context_labels = arange(B)``.
    """

    ignored_arguments: ClassVar[Mapping[str, str]] = {"vocab_size": DEPRECATED}

    data_dir: str | list[str] = arg(help="folder(s) of *.h5 files")
    shuffle: bool = arg(False, help="shuffle the files and the samples")
    shuffle_buffer: int | None = arg(
        None, help="samples in the shuffle buffer (null: 10 x batch_size)", gt=0
    )
    use_vsl: bool = arg(False, help="not used by DPR's data (accepted as in Model Zoo)")
    features_list: list[Any] = arg(
        [list(names) for names in DPR_FEATURES],
        help="names of the rows of data_0 and data_1 (data_params.json's replace them)",
    )

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The folders exist."""
        yield from folder_problems(arguments, "data_dir")


@attrs.frozen
class _Seq2SeqArgs(LoadingArgs):
    ignored_arguments: ClassVar[Mapping[str, str]] = {
        "vocab_size": DEPRECATED,
        "tgt_vocab_file": DEPRECATED + " (one vocabulary, src_vocab_file, serves both sides)",
        "tgt_data_dir": DEPRECATED,
    }

    src_vocab_file: str = arg(help="vocabulary: one token per line, the id is the line number")
    src_max_sequence_length: int = arg(help="encoder tokens per sample (padded)", gt=1)
    tgt_max_sequence_length: int = arg(help="decoder tokens per sample (padded)", gt=1)
    shuffle_buffer: int | None = arg(
        None, help="samples in the shuffle buffer (null: 10 x batch_size)", gt=0
    )
    extra_ids: int = arg(0, help="sentinel ids appended to the vocabulary", ge=0)
    do_lower: bool = arg(
        False, help="Model Zoo's quirk: lower-cases only the special tokens' names"
    )
    buckets: list[int] | None = arg(None, help="length bucketing (not supported: null)")
    dynamic_loss_weight: bool = arg(
        False, help="add loss_weight = batch_size / decoder tokens of the batch ([B, 1])"
    )
    pack_sequences: bool = arg(False, help="concatenate documents before splitting them")
    num_documents_to_concatenate: int = arg(128, help="documents per packed sequence", gt=0)
    oov_token: str = arg("<unk>", help="the vocabulary's unknown token")
    sos_token: str = arg("<s>", help="start of the decoder input")
    eos_token: str = arg("</s>", help="end of sequence")
    pad_token: str = arg("<pad>", help="padding")
    labels_pad_id: int | None = arg(None, help="labels' padding (null: pad_token's id)", ge=0)
    input_pad_id: int | None = arg(None, help="inputs' padding (null: pad_token's id)", ge=0)


@attrs.frozen
class T5Args(_Seq2SeqArgs):
    """Model Zoo's T5DynamicDataProcessor: span corruption of text in the loader.

    ``src_data_dir`` holds text files of space-separated SentencePiece pieces, one document
    per line, listed in its ``meta.dat``. Documents are tokenized, split into pieces whose
    corrupted input fits ``src_max_sequence_length``, shuffled through a buffer, and corrupted
    as Model Zoo's ``t5_utils`` does (noise density 0.15, mean span 3; numpy
    ``default_rng`` seeded from ``shuffle_seed``, the epoch and the piece): noise spans become
    sentinels counting down from vocabulary size + extra_ids - 1 in the input, and the target
    holds each sentinel and its span; both end with ``</s>``. ``decoder_input_ids`` start with
    ``sos_token``'s id when the vocabulary has it, else with the pad id (T5's decoder start;
    T5's vocabulary has no ``<s>``).
    """

    src_data_dir: str = arg(help="folder of text files listed in its meta.dat")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The files exist; no bucketing."""
        yield from folder_problems(arguments, "src_data_dir")
        yield from file_problems(arguments, "src_vocab_file")
        yield from bucket_problems(arguments)


@attrs.frozen
class TransformerArgs(_Seq2SeqArgs):
    """Model Zoo's TransformerDynamicDataProcessor: aligned lines of BPE tokens.

    ``src_data_dir`` is the source file (e.g. ``train.tok.clean.bpe.32000.en``), whose target
    is the file of the same stem with the other language's suffix (``….de``), or a folder whose
    ``meta.dat`` lists ``SOURCE TARGET COUNT`` per line (Model Zoo's layout). One vocabulary,
    ``src_vocab_file``, serves both sides. Pairs with an empty side or a side of at least its
    maximum length are left out, as Model Zoo does. ``input_ids`` are the source ids,
    ``labels`` the target ids and ``</s>``, ``decoder_input_ids`` ``<s>`` and the target ids.
    """

    src_data_dir: str = arg(help="the source text file (its target beside it), or a folder")

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem]:
        """The files exist; no bucketing."""
        yield from path_problems("src_data_dir", arguments.get("src_data_dir"))
        yield from file_problems(arguments, "src_vocab_file")
        yield from bucket_problems(arguments)
