"""What ``plugtrain lm_eval`` does: the run file's model and harness, the flags applied, once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from plugtrain import build_component
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_models.evaluation.harness import EleutherEvalHarness
from plugtrain_models.evaluation.schemas import lm_eval_missing
from plugtrain_models.generation.loading import LoadedRun, data_tokenizer, load_run
from plugtrain_models.generation.prompts import started_from_folder
from plugtrain_models.generation.text import BYTES, has_tokenizer_files

__all__ = ["HARNESS", "lm_eval_command"]

HARNESS = "EleutherEvalHarness"

FLAGS = {
    "tasks": "tasks",
    "num_fewshot": "num_fewshot",
    "limit": "limit",
    "output_path": "output_path",
    "include_path": "include_path",
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
}
"""Command-line flag -> the ``eeh_args`` key it overrides."""


def _harness(loaded: LoadedRun, args: argparse.Namespace) -> EleutherEvalHarness:
    specs = [  # a name may be written "plugtrain-models:EleutherEvalHarness"
        spec for spec in loaded.plan.callbacks
        if str(getattr(spec, "name", "")).rsplit(":", 1)[-1] == HARNESS
    ]  # fmt: skip
    if specs:
        built: EleutherEvalHarness = build_component(loaded.registry, "callback", specs[0])
        return built
    if args.tasks is None:
        message = f"the run file's trainer has no {HARNESS} callback: add one, or give --tasks"
        raise ConfigError([ConfigIssue(HARNESS, message)])
    return EleutherEvalHarness(eeh_args={"tasks": args.tasks}, batch_size=args.batch_size or 1)


def _apply_flags(harness: EleutherEvalHarness, args: argparse.Namespace) -> None:
    changed: dict[str, Any] = {
        key: getattr(args, flag) for flag, key in FLAGS.items() if getattr(args, flag) is not None
    }
    if args.output_path is not None:  # a flag's path is the user's, not under model_dir
        changed["output_path"] = str(Path(args.output_path).resolve())
    harness.eeh = {**harness.eeh, **changed}
    if args.batch_size is not None:
        harness.batch_size = args.batch_size


def _tokenizer_dir(
    harness: EleutherEvalHarness, args: argparse.Namespace, loaded: LoadedRun
) -> None:
    if args.tokenizer is not None:
        harness.tokenizer_dir = args.tokenizer
        return
    named = harness.pretrained_model_name_or_path
    own = harness.tokenizer_file_path is not None or (named and has_tokenizer_files(named))
    if own:
        return
    if loaded.source is not None:  # as generate: the checkpoint's folder, the file's folder,
        source = Path(loaded.source)  # or the folder a plugtrain checkpoint's run started from
        for candidate in (source, source.parent, started_from_folder(loaded.source)):
            if candidate is not None and has_tokenizer_files(candidate):
                harness.tokenizer_dir = str(candidate)
                return
    recorded = data_tokenizer(loaded.plan)  # the tokenizer the run file's data was written with
    if recorded is not None:
        spec, eos = recorded
        harness.tokenizer_file_path, harness.eos_id = spec, eos if spec != BYTES else None


def lm_eval_command(args: argparse.Namespace, out: TextIO) -> int:
    """``plugtrain lm_eval``: see :mod:`plugtrain_models.evaluation.command`."""
    missing = lm_eval_missing()
    if missing is not None:
        raise ConfigError([ConfigIssue(HARNESS, missing)])
    loaded = load_run(args.run_file, args.set, args.ckpt)
    harness = _harness(loaded, args)
    _apply_flags(harness, args)
    _tokenizer_dir(harness, args, loaded)
    metrics = harness.run(loaded.trainer)
    for name, value in metrics.items():
        out.write(f"{name} {value:.6g}\n")
    return 0
