"""``plugtrain preprocess``: text files (or the stdlib corpus) to Model Zoo's GPT HDF5 files.

With ``--config FILE.yaml`` it runs Model Zoo's preprocessing file instead
(:mod:`plugtrain_models.data.config_run`): fine-tuning data with loss masks, or pre-training text.

Both ``GptHDF5MapDataProcessor`` and ``GptHDF5DataProcessor`` read what it writes; no download
is ever needed (the ``stdlib`` input is the running Python's own source).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from plugtrain.errors import TrainingError
from plugtrain_models.data.documents import STDLIB, documents, input_files, stdlib_documents
from plugtrain_models.data.output_dir import fresh_output_dir
from plugtrain_models.data.packing import Packer
from plugtrain_models.data.tokenizer import BYTES, Tokenizer, load_tokenizer
from plugtrain_models.data.writer import SampleWriter, write_corpus, write_params

__all__ = ["main", "parser", "preprocess"]

DEFAULT_STDLIB_BYTES = 1_000_000
BATCH = 256  # documents tokenized together


def parser() -> argparse.ArgumentParser:
    """The command line of ``plugtrain preprocess``."""
    command = argparse.ArgumentParser(
        prog="plugtrain preprocess",
        description="Write Model Zoo GPT HDF5 files (GptHDF5MapDataProcessor, "
        "GptHDF5DataProcessor) from text files or the built-in standard-library corpus.",
    )
    command.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help=".txt (one document per line), .jsonl or .jsonl.gz files or folders of them; "
        f"'{STDLIB}' for the standard-library corpus",
    )
    command.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="Model Zoo's preprocessing file (setup, processing, dataset): fine-tuning "
        "prompt/completion or chat data, or pre-training text; takes no other option",
    )
    command.add_argument("-o", "--output-dir", help="folder to write (required without --config)")
    command.add_argument(
        "--tokenizer",
        default=BYTES,
        help="'bytes' (UTF-8 bytes, EOS = pad = 256), a local tokenizer.json or a tokenizer folder",
    )
    command.add_argument("--eos-id", type=int, default=None, help="override the EOS id")
    command.add_argument("--pad-id", type=int, default=None, help="override the pad id (EOS)")
    command.add_argument("--max-seq-length", type=int, default=2048, help="sequence length")
    command.add_argument("--samples-per-file", type=int, default=4096, help="samples per file")
    command.add_argument(
        "--min-sequence-length",
        type=int,
        default=10,
        help="a final partial chunk shorter than this is dropped (longer: padded)",
    )
    command.add_argument("--text-key", default="text", help="field of a JSON lines record")
    command.add_argument(
        "--no-pack", dest="pack", action="store_false", help="chunk each document on its own"
    )
    command.add_argument(
        "--format",
        choices=("samples", "corpus"),
        default="samples",
        help="samples [n, 3, msl] (default) or one rank-1 token stream (needs "
        "max_sequence_length in GptHDF5MapDataProcessor)",
    )
    command.add_argument("--shuffle", action="store_true", help="permute the samples")
    command.add_argument("--seed", type=int, default=0, help="seed of --shuffle")
    command.add_argument(
        "--stdlib-corpus",
        type=int,
        default=None,
        metavar="BYTES",
        help=f"add the standard-library corpus, this many bytes ('{STDLIB}' as an input: "
        f"{DEFAULT_STDLIB_BYTES})",
    )
    command.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    return command


def _documents(args: argparse.Namespace) -> Iterator[str]:
    files = input_files([i for i in args.inputs if i != STDLIB])
    for path in files:
        yield from documents(path, args.text_key)
    budget = args.stdlib_corpus
    if budget is None and STDLIB in args.inputs:
        budget = DEFAULT_STDLIB_BYTES
    if budget is not None:
        yield from stdlib_documents(budget)


def _check(args: argparse.Namespace) -> None:
    if args.output_dir is None:
        raise TrainingError("give -o/--output-dir (or --config FILE.yaml)")
    if not args.inputs and args.stdlib_corpus is None:
        raise TrainingError(f"give an INPUT (files, folders or '{STDLIB}') or --stdlib-corpus")
    for name in ("max_seq_length", "samples_per_file", "min_sequence_length"):
        if getattr(args, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be >= 1")
    if args.format == "corpus" and (args.shuffle or not args.pack):
        raise TrainingError("--format corpus writes the stream as it is: no --shuffle, --no-pack")


def _progress(items: Iterator[str], enabled: bool | None) -> Iterator[str]:
    try:
        from tqdm import tqdm  # with plugtrain[train]; without it, no bar
    except ImportError:
        return items

    disable = None if enabled is None else not enabled  # None: only on a terminal
    return iter(tqdm(items, desc="preprocess", unit=" docs", disable=disable, file=sys.stderr))


def preprocess(args: argparse.Namespace) -> dict[str, Any]:
    """Write the files ``args`` asks for; returns what ``data_params.json`` holds."""
    _check(args)
    tokenizer = load_tokenizer(args.tokenizer, args.eos_id, args.pad_id)
    output = Path(args.output_dir)
    msl = args.max_seq_length
    with fresh_output_dir(output):
        docs = _progress(_documents(args), args.progress)
        if args.format == "corpus":
            stats = _write_corpus(docs, tokenizer, output, msl, args.samples_per_file)
        else:
            stats = _write_samples(docs, tokenizer, output, args)
        params = {
            "eos_id": tokenizer.eos_id,
            "pad_id": tokenizer.pad_id,
            "vocab_size": tokenizer.vocab_size,
            "max_seq_length": msl,
            **stats,
            "processing": {
                "tokenizer": tokenizer.spec,
                "format": args.format,
                "pack_sequences": args.pack,
                "min_sequence_length": args.min_sequence_length,
                "shuffle": args.shuffle,
                "seed": args.seed,
                "samples_per_file": args.samples_per_file,
            },
        }
        write_params(output, params)
    return params


def _batches(docs: Iterator[str], tokenizer: Tokenizer) -> Iterator[list[np.ndarray]]:
    """The documents' ids, :data:`BATCH` documents encoded at a time."""
    batch: list[str] = []
    for text in docs:
        batch.append(text)
        if len(batch) == BATCH:
            yield tokenizer.encode_many(batch)
            batch = []
    if batch:
        yield tokenizer.encode_many(batch)


def _write_corpus(
    docs: Iterator[str], tokenizer: Tokenizer, output: Path, msl: int, per_file: int
) -> dict[str, Any]:
    eos = np.array([tokenizer.eos_id], dtype=np.int32)
    parts = [np.concatenate([p for ids in batch for p in (ids, eos)])
             for batch in _batches(docs, tokenizer)]  # fmt: skip
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    if len(tokens) < msl + 1:
        raise TrainingError(f"{len(tokens)} tokens: too few for one sequence of {msl}")
    files = write_corpus(output, tokens, msl, per_file)
    samples = (len(tokens) - 1) // msl
    return {"n_examples": samples, "num_tokens": len(tokens), "files": len(files)}


def _write_samples(
    docs: Iterator[str], tokenizer: Tokenizer, output: Path, args: argparse.Namespace
) -> dict[str, Any]:
    msl = args.max_seq_length
    packer = Packer(
        msl,
        tokenizer.eos_id,
        tokenizer.pad_id,
        pack=args.pack,
        min_sequence_length=args.min_sequence_length,
    )
    writer = SampleWriter(output, msl, args.samples_per_file)
    kept: list[np.ndarray] = []  # --shuffle permutes all samples before writing
    num_tokens = 0
    for batch in _batches(docs, tokenizer):
        num_tokens += sum(len(tokens) + 1 for tokens in batch)
        made = packer.add_many(batch)
        if args.shuffle:
            kept.extend(made)
        else:
            writer.add(made)
    if args.shuffle:
        kept.extend(packer.add_many([], finish=True))
        order = np.random.default_rng(args.seed).permutation(len(kept))
        writer.add(kept[i] for i in order)
    else:
        writer.add(packer.add_many([], finish=True))
    writer.close()
    if not writer.samples:
        raise TrainingError(f"{num_tokens} tokens made no sample of {msl}")
    return {
        "n_examples": writer.samples,
        "num_tokens": num_tokens,
        "loss_valid_tokens": writer.loss_valid_tokens,
        "num_pad_tokens": writer.num_pad_tokens,
        "dropped_tokens": packer.dropped_tokens,
        "files": len(writer.files),
    }


def main(argv: Sequence[str], out: TextIO = sys.stdout) -> int:
    """Run ``plugtrain preprocess`` with ``argv`` (the arguments after ``preprocess``).

    :raises TrainingError: bad arguments or inputs (the CLI prints it without a traceback).
    """
    args = parser().parse_args(list(argv))
    if args.config is not None:
        if args.inputs or args.output_dir is not None:
            raise TrainingError("--config takes no INPUT or -o: the file's setup section says")
        from plugtrain_models.data.config_run import run_config

        run_config(args.config, out, sys.stderr)
        return 0
    params = preprocess(args)
    out.write(
        f"{args.output_dir}: {params['n_examples']} samples of {params['max_seq_length']} "
        f"tokens in {params['files']} files ({params['num_tokens']} tokens, tokenizer "
        f"{params['processing']['tokenizer']}, vocab_size {params['vocab_size']})\n"
    )
    return 0
