"""What ``plugtrain generate`` does: load the run file's model, resolve the tokenizer, write."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_models.generation.decode import generate, language_model
from plugtrain_models.generation.loading import (
    LoadedRun,
    data_tokenizer,
    load_run,
    model_defaults,
)
from plugtrain_models.generation.prompts import (
    checkpoint_eos_ids,
    encode_prompt,
    read_prompts,
    started_from_folder,
)
from plugtrain_models.generation.sampling import Sampling
from plugtrain_models.generation.text import (
    BYTES,
    TextTokenizer,
    has_tokenizer_files,
    load_text_tokenizer,
)

__all__ = ["DEFAULT_MAX_TOKENS", "generate_command", "resolve_tokenizer"]

DEFAULT_MAX_TOKENS = 64
"""New tokens when neither ``--max-tokens`` nor the model section's ``max_tokens`` says."""


def resolve_tokenizer(explicit: str | None, loaded: LoadedRun) -> TextTokenizer:
    """The tokenizer of ``generate`` and ``lm_eval`` (see ``docs/fine-tuning.md``).

    ``--tokenizer``, else the checkpoint's folder if it holds one, else the Hugging Face
    folder a plugtrain checkpoint's run started from if it holds one, else the tokenizer the
    run file's data was written with (its ``data_params.json``), else the byte tokenizer.
    """
    if explicit is not None:
        return load_text_tokenizer(explicit)
    if loaded.source is not None:
        folder = Path(loaded.source)
        for candidate in (folder, folder.parent, started_from_folder(loaded.source)):
            if candidate is not None and has_tokenizer_files(candidate):
                return load_text_tokenizer(candidate)
    recorded = data_tokenizer(loaded.plan)
    if recorded is not None:
        spec, eos = recorded
        return load_text_tokenizer(spec, eos if spec != BYTES else None)
    vocab = language_model(loaded.model).settings.vocab_size
    if vocab < 257:
        message = (
            f"no tokenizer: give --tokenizer DIR (the model's {vocab} ids are too few for the "
            "byte tokenizer, which needs 257)"
        )
        raise ConfigError([ConfigIssue("--tokenizer", message)])
    sys.stderr.write("plugtrain: no tokenizer folder given or found: using the byte tokenizer\n")
    return load_text_tokenizer(BYTES)


def _stop_sequences(value: Any) -> list[list[int]]:
    """The model section's ``stop_sequences``: an id, a list of ids, or a list of lists."""
    if value is None:
        return []
    if isinstance(value, int):
        return [[value]]
    if all(isinstance(item, int) for item in value):
        return [list(value)]
    return [[item] if isinstance(item, int) else list(item) for item in value]


def _sampling(args: argparse.Namespace, defaults: dict[str, Any]) -> Sampling:
    values = {
        key: getattr(args, key) if getattr(args, key) is not None else defaults[key]
        for key in ("temperature", "top_k", "top_p")
    }
    try:
        return Sampling(**values)
    except ValueError as exc:
        raise ConfigError([ConfigIssue("sampling", str(exc))]) from None


def generate_command(args: argparse.Namespace, out: TextIO) -> int:
    """``plugtrain generate``: see :mod:`plugtrain_models.generation.command`."""
    prompts = read_prompts(args.prompt, args.prompts_file)
    loaded = load_run(args.run_file, args.set, args.ckpt)
    defaults = model_defaults(loaded.plan)
    tokenizer = resolve_tokenizer(args.tokenizer, loaded)
    max_tokens = args.max_tokens or defaults["max_tokens"] or DEFAULT_MAX_TOKENS
    start = defaults["start_token"]
    pad = start[0] if isinstance(start, list) else start
    chat = bool(getattr(args, "chat", False))
    encoded = [encode_prompt(tokenizer, prompt, chat) for prompt in prompts]
    eos_ids = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    eos_ids += [i for i in checkpoint_eos_ids(loaded.source) if i not in eos_ids]
    try:
        generated = generate(
            loaded.model, encoded, max_tokens, sampling=_sampling(args, defaults),
            eos_ids=eos_ids,
            stop_sequences=_stop_sequences(defaults["stop_sequences"]), seed=args.seed,
            pad_id=tokenizer.pad_id if pad is None else pad,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError([ConfigIssue("generate", str(exc))]) from None
    for prompt, ids in zip(prompts, generated, strict=True):
        text = tokenizer.decode(ids)
        if args.json:
            out.write(json.dumps({"prompt": prompt, "token_ids": ids, "text": text}) + "\n")
        else:
            shown = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
            out.write(f"{shown}{text}\n")
    return 0
