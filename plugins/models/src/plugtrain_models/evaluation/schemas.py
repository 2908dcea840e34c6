"""Argument schemas of ``EleutherEvalHarness`` and ``BigCodeEvalHarness`` (torch-free).

The keys are Model Zoo's. What only means something on a Cerebras system (``keep_data_dir``,
``flags``, the data loader's worker keys) is accepted, and ``plugtrain check`` and the run say
at its line that it has no effect (``ignored_arguments``): the requests run through
plugtrain's own model in this process (:mod:`plugtrain_models.evaluation.harness`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import attrs

from plugtrain.schema import Problem, about, arg

__all__ = [
    "CSX_ONLY_KEYS",
    "EVAL_EXTRA",
    "BigCodeEvalHarnessArgs",
    "EleutherCLIArgs",
    "EleutherEvalHarnessArgs",
    "lm_eval_missing",
]

LM_EVAL_RANGE = ">=0.4.13,<0.5"
"""The lm-eval versions plugtrain-models is tested with (its ``eval`` extra)."""

EVAL_EXTRA = "pip install 'plugtrain-models[eval]'"
"""What installs lm-eval."""

CSX_ONLY_KEYS = (
    "keep_data_dir",
    "flags",
    "shuffle",
    "num_workers",
    "prefetch_factor",
    "persistent_workers",
    "drop_last",
)
"""Keys that only a Cerebras system's data pipeline reads: accepted, reported as no effect."""

CSX_ONLY = (
    "only a Cerebras system reads it (its request files, data loader workers and csx flags); "
    "here the requests run through the model in this process"
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def lm_eval_missing() -> str | None:
    """Why ``EleutherEvalHarness`` cannot run here (lm-eval absent), or ``None`` when it can."""
    if _installed("lm_eval"):
        return None
    return f"EleutherEvalHarness needs lm-eval{LM_EVAL_RANGE}, which is not installed: {EVAL_EXTRA}"


@attrs.frozen
class EleutherCLIArgs:
    """``eeh_args``: lm-eval's own settings, as Model Zoo's ``EleutherCLIArgs``."""

    tasks: str | list[str] = arg(
        help="task names (comma-separated or a list), or a task YAML file or folder"
    )
    num_fewshot: int | None = arg(None, ge=0, help="examples in each few-shot context")
    output_path: str | None = arg(
        None, help="where lm-eval's results JSON goes (a relative path: under model_dir)"
    )
    limit: float | None = arg(
        None, gt=0, help="examples per task (below 1: a fraction of each task)"
    )
    use_cache: str | None = arg(None, help="an sqlite file caching the model's answers")
    cache_requests: Literal["true", "refresh", "delete"] | None = arg(
        None, help="cache the built requests"
    )
    check_integrity: bool = arg(False, help="run the tasks' own tests first")
    write_out: bool = arg(False, help="print the prompts of the first documents")
    log_samples: bool = arg(False, help="write every sample's output next to the results")
    system_instruction: str | None = arg(None, help="a system instruction for every prompt")
    apply_chat_template: bool | str = arg(
        False, help="render prompts with the tokenizer's chat template (or the named one)"
    )
    fewshot_as_multiturn: bool = arg(False, help="few-shot examples as a multi-turn chat")
    show_config: bool = arg(False, help="print every task's configuration at the end")
    include_path: str | None = arg(None, help="a folder of extra task YAMLs")
    predict_only: bool = arg(False, help="only write the outputs (with log_samples)")
    seed: int | str | list[int | None] = arg(
        "0,1234,1234,1234", help="python, numpy, torch and fewshot seeds (comma-separated)"
    )
    trust_remote_code: bool = arg(False, help="let datasets run a task's own code")
    verbosity: str = arg("INFO", help="lm-eval's log level")
    max_tokens: int | None = arg(None, gt=0, help="most tokens generate_until writes")
    temperature: float | None = arg(None, gt=0, help="generation's sampling temperature")
    top_k: int | None = arg(None, gt=0, help="generation's top-k")
    top_p: float | None = arg(None, ge=0, le=1, help="generation's top-p")


def _data_problems(arguments: Mapping[str, Any]) -> Iterator[Problem]:
    path, name = arguments["tokenizer_file_path"], arguments["pretrained_model_name_or_path"]
    if path is not None and name is not None:
        message = "give tokenizer_file_path or pretrained_model_name_or_path, not both"
        yield about("tokenizer_file_path", message)
    if path is not None and arguments["eos_id"] is None:
        yield about("eos_id", "is required with tokenizer_file_path")


@attrs.frozen
class EleutherEvalHarnessArgs:
    """Run lm-eval on the model being trained (during fit and validate_all) or by itself."""

    eeh_args: dict[str, Any] = arg(section=EleutherCLIArgs, help="lm-eval's settings")
    every_n_vals: int = arg(1, ge=1, help="run at every n-th evaluation of fit (and at its end)")
    batch_size: int = arg(help="requests per forward pass", gt=0)
    data_dir: str | None = arg(
        None, help="Model Zoo's request dump folder (accepted, never written here)"
    )
    max_sequence_length: int | None = arg(
        None, gt=0, help="longest request in tokens (default: max_position_embeddings)"
    )
    tokenizer_file_path: str | None = arg(None, help="a tokenizer.json (needs eos_id)")
    eos_id: int | None = arg(None, ge=0, help="the EOS id (with tokenizer_file_path)")
    pretrained_model_name_or_path: str | None = arg(
        None, help="a local Hugging Face tokenizer folder (its EOS replaces eos_id)"
    )
    name_scope: str | None = arg(None, help="metric prefix and output folder name")

    ignored_arguments: ClassVar[Mapping[str, str]] = dict.fromkeys(CSX_ONLY_KEYS, CSX_ONLY)

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[Problem | str]:
        """One tokenizer source; lm-eval installed."""
        yield from _data_problems(arguments)
        missing = lm_eval_missing()
        if missing is not None:
            yield missing


BIGCODE_PACKAGE = "bigcode-evaluation-harness"
"""The package BigCodeEvalHarness needs (from its own repository; not on PyPI)."""


@attrs.frozen
class BigCodeEvalHarnessArgs:
    """Model Zoo's bigcode-evaluation-harness callback: not runnable here (see the message)."""

    bigcode_args: dict[str, Any] = arg(help="bigcode-evaluation-harness's settings")
    every_n_vals: int = arg(1, ge=1, help="run at every n-th evaluation")
    batch_size: int = arg(help="requests per forward pass", gt=0)
    data_dir: str = arg(help="Model Zoo's request dump folder")
    max_sequence_length: int | None = arg(None, gt=0, help="longest request in tokens")
    tokenizer_file_path: str | None = arg(None, help="a tokenizer.json (needs eos_id)")
    eos_id: int | None = arg(None, ge=0, help="the EOS id")
    pretrained_model_name_or_path: str | None = arg(None, help="a Hugging Face tokenizer")
    name_scope: str | None = arg(None, help="metric prefix and output folder name")

    ignored_arguments: ClassVar[Mapping[str, str]] = dict.fromkeys(CSX_ONLY_KEYS, CSX_ONLY)

    @staticmethod
    def cross_check(arguments: Mapping[str, Any]) -> Iterator[str]:
        """Always a problem: its package is not installed with plugtrain."""
        if not _installed("bigcode_eval"):
            yield (
                f"BigCodeEvalHarness needs the {BIGCODE_PACKAGE} package (import name "
                "bigcode_eval, Model Zoo pins commit f0b81a9d079289881bd42f509811d42fe73e58cf), "
                "which is not on PyPI and not installed; plugtrain has no runner for it"
            )
        else:
            yield "BigCodeEvalHarness: bigcode_eval is installed, but plugtrain cannot run it"
