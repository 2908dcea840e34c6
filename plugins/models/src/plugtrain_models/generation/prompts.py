"""What ``plugtrain generate`` starts from: prompts, chats, and the checkpoint folder's EOS ids.

- ``--prompts-file FILE``: one prompt a line; a ``.jsonl`` file holds one JSON object a line,
  ``{"prompt": TEXT}`` (a text may span lines) or ``{"messages": [{"role": ..., "content":
  ...}, ...]}`` (a chat).
- A chat, and with ``--chat`` every text prompt (as one user turn), is rendered with the
  tokenizer's chat template and an assistant turn opened (``add_generation_prompt``), then
  encoded without the tokenizer's special tokens: the template writes the BOS it wants, so no
  second one is added (as transformers' ``apply_chat_template(tokenize=True)``).
- Generation stops at the tokenizer's EOS and at the ``eos_token_id`` (an id or a list) of the
  checkpoint folder's ``generation_config.json`` and ``config.json`` (for a plugtrain
  checkpoint, those of the Hugging Face folder its run started from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain_models.generation.text import TextTokenizer

__all__ = [
    "Prompt",
    "checkpoint_eos_ids",
    "encode_prompt",
    "read_prompts",
    "started_from_folder",
]

Prompt = str | list[dict[str, str]]
"""A text, or a chat: messages with ``role`` and ``content``."""


def _issue(message: str) -> ConfigError:
    return ConfigError([ConfigIssue("--prompts-file", message)])


def _json_prompt(path: Path, number: int, line: str) -> Prompt:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise _issue(f"{path}:{number}: not a JSON object: {exc}") from None
    if isinstance(record, dict) and isinstance(record.get("prompt"), str):
        return str(record["prompt"])
    messages = record.get("messages") if isinstance(record, dict) else None
    if isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    message = (
        f'{path}:{number}: give {{"prompt": TEXT}} or {{"messages": [{{"role": ..., '
        '"content": ...}, ...]}'
    )
    raise _issue(message)


def _is_message(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("role"), str)
        and isinstance(value.get("content"), str)
    )


def read_prompts(texts: list[str] | None, file: str | None) -> list[Prompt]:
    """The prompts of ``--prompt`` or ``--prompts-file`` (see the module).

    :raises ConfigError: the file is missing, empty, or holds a line that is no prompt.
    """
    if texts:
        return list(texts)
    path = Path(str(file))
    if not path.is_file():
        raise _issue(f"{path}: no such file")
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".jsonl":
        prompts = [_json_prompt(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise _issue(f"{path}: holds no prompt")
    return prompts


def encode_prompt(tokenizer: TextTokenizer, prompt: Prompt, chat: bool) -> list[int]:
    """The ids of a prompt: a chat (or, with ``chat``, a text as a user turn) rendered first.

    :raises ConfigError: a chat with a tokenizer that has no chat template.
    """
    if isinstance(prompt, str) and not chat:
        return tokenizer.encode(prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    view = tokenizer.hf
    template = getattr(getattr(view, "folder", None), "chat_template", None)
    if view is None or template is None:
        message = (
            f"the tokenizer {tokenizer.name} has no chat template (tokenizer_config.json's "
            "chat_template): give --tokenizer a folder that has one, or plain prompts"
        )
        raise ConfigError([ConfigIssue("--chat", message)])
    text = view.apply_chat_template(messages, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def _eos_of(file: Path) -> list[int]:
    try:
        value = json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return []
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]


def started_from_folder(source: str | None) -> Path | None:
    """The Hugging Face folder a plugtrain checkpoint's run started from, if it records one.

    ``None`` for a Hugging Face checkpoint, a folder, a file recording no starting folder (or
    one no longer there) and a file that is no plugtrain checkpoint.
    """
    from plugtrain.conversion.files import is_hf_checkpoint
    from plugtrain.conversion.plugtrain_files import read_started_from

    if source is None:
        return None
    path = Path(source)
    if not path.is_file() or is_hf_checkpoint(path):
        return None
    try:
        return read_started_from(path)
    except Exception:  # noqa: BLE001 - not a plugtrain file: the EOS ids of its folder alone
        return None


def checkpoint_eos_ids(source: str | None) -> list[int]:
    """The EOS ids of the folder the weights came from (``generation_config.json`` first).

    For a plugtrain checkpoint, that is the Hugging Face folder its run started from
    (``metadata.started_from``, as exports read it), else the checkpoint's own folder.
    """
    if source is None:
        return []
    path = Path(source)
    folder = path if path.is_dir() else (started_from_folder(source) or path.parent)
    found: list[int] = []
    for name in ("generation_config.json", "config.json"):
        found += [i for i in _eos_of(folder / name) if i not in found]
    return found
