"""Model Zoo's read hooks: a record to a *semantic data array*, and how ``read_hook`` finds them.

A semantic data array is a list of turns ``{type: role, content: [{text: ...}, ...]}``.
``read_hook`` names a function as ``module:function``: Model Zoo's paths
(``cerebras.modelzoo.data_preparation.data_preprocessing.hooks:NAME``) name the hooks here,
and any other importable function (a plugin's own hook) is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "HOOKS",
    "MODELZOO_MODULE",
    "chat_read_hook",
    "dpo_read_hook",
    "dpo_text_read_hook",
    "load_read_hook",
    "prompt_completion_chat_read_hook",
    "prompt_completion_text_read_hook",
    "text_read_hook",
]

MODELZOO_MODULE = "cerebras.modelzoo.data_preparation.data_preprocessing.hooks"
"""The module Model Zoo's configuration files name their read hooks in."""

Turns = list[dict[str, Any]]


def _require(kwargs: Mapping[str, Any], hook: str, *keys: str) -> list[Any]:
    missing = [k for k in keys if kwargs.get(k) is None]
    if missing:
        raise ValueError(f"{hook} needs read_hook_kwargs {', '.join(missing)}")
    return [kwargs[k] for k in keys]


def _text(example: Mapping[str, Any], key: str, names: str) -> Any:
    """The record's field ``key`` (given as ``names``): a string, or ``None`` when absent.

    :raises ValueError: the field holds something else than text (a number, a list).
    """
    value = example.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{names} {key!r} holds {value!r} ({type(value).__name__}), not text")
    return value


def text_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """Pre-training text: the record's ``text_key`` field, stripped."""
    (text_key,) = _require(read_hook_kwargs, "text_read_hook", "text_key")
    return [{"content": [{"text": (_text(example, text_key, "text_key") or "").strip()}]}]


def prompt_completion_text_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """A ``prompt`` and a ``completion`` turn (the plain-text path: prompt + sep + completion)."""
    prompt_key, completion_key = _require(
        read_hook_kwargs, "prompt_completion_text_read_hook", "prompt_key", "completion_key"
    )
    return [
        {"type": "prompt", "content": [{"text": _text(example, prompt_key, "prompt_key")}]},
        {
            "type": "completion",
            "content": [{"text": _text(example, completion_key, "completion_key")}],
        },
    ]


def _stripped(value: Any) -> Any:
    return value.strip() if isinstance(value, str) and value else None


def prompt_completion_chat_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """A ``user`` and an ``assistant`` turn, stripped (rendered with the chat template)."""
    prompt_key, completion_key = _require(
        read_hook_kwargs, "prompt_completion_chat_read_hook", "prompt_key", "completion_key"
    )
    prompt = _stripped(_text(example, prompt_key, "prompt_key"))
    completion = _stripped(_text(example, completion_key, "completion_key"))
    return [
        {"type": "user", "content": [{"text": prompt}]},
        {"type": "assistant", "content": [{"text": completion}]},
    ]


def chat_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """A chat: an optional system turn, then user/assistant pairs, each stripped.

    A chat with an odd number of turns after the system turn, or two turns of one role in a
    pair, gives ``[]`` (the record is skipped, as in Model Zoo).
    """
    key, role_key, content_key = _require(
        read_hook_kwargs,
        "chat_read_hook",
        "multi_turn_key",
        "multi_turn_role_key",
        "multi_turn_content_key",
    )
    conversation = list(example.get(key) or [])
    if not conversation:
        return []
    turns: Turns = []
    if conversation[0].get(role_key) == "system":
        system = conversation.pop(0).get(content_key)
        if system:
            turns.append({"type": "system", "content": [{"text": system}]})
    if len(conversation) % 2:
        return []
    for user, assistant in zip(conversation[::2], conversation[1::2], strict=True):
        if user.get(role_key) == assistant.get(role_key):
            return []
        for turn in (user, assistant):
            content = _stripped(turn.get(content_key))
            turns.append({"type": turn.get(role_key), "content": [{"text": content}]})
    return turns


def _dpo_turns(example: Mapping[str, Any], kwargs: Mapping[str, Any], hook: str) -> list[Any]:
    """``(prompt, chosen, rejected)`` texts of a record: strings, or chats (Model Zoo's lists).

    A chat field is a list of ``{role, content}`` messages: the prompt is the first message of
    ``chosen``, each response the second of its list.
    """
    chosen_key, rejected_key = _require(kwargs, hook, "chosen_key", "rejected_key")
    chosen, rejected = example.get(chosen_key), example.get(rejected_key)
    if isinstance(chosen, list) and isinstance(rejected, list):
        if len(chosen) < 2 or len(rejected) < 2:
            raise ValueError(f"{chosen_key} and {rejected_key} chats need a prompt and a response")
        return [chosen[0].get("content"), chosen[1].get("content"), rejected[1].get("content")]
    (prompt_key,) = _require(kwargs, hook, "prompt_key")
    return [example.get(prompt_key), chosen, rejected]


def dpo_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """``prompt``, ``chosen`` and ``rejected`` turns (``mode: dpo``, chat-templated)."""
    texts = _dpo_turns(example, read_hook_kwargs, "dpo_read_hook")
    kinds = ("prompt", "chosen", "rejected")
    return [{"type": k, "content": [{"text": t or ""}]} for k, t in zip(kinds, texts, strict=True)]


def dpo_text_read_hook(example: Mapping[str, Any], **read_hook_kwargs: Any) -> Turns:
    """As :func:`dpo_read_hook`, for the plain path: the prompt turn is ``text_prompt``."""
    texts = _dpo_turns(example, read_hook_kwargs, "dpo_text_read_hook")
    kinds = ("text_prompt", "chosen", "rejected")
    return [{"type": k, "content": [{"text": t or ""}]} for k, t in zip(kinds, texts, strict=True)]


HOOKS: dict[str, Callable[..., Turns]] = {
    "text_read_hook": text_read_hook,
    "prompt_completion_text_read_hook": prompt_completion_text_read_hook,
    "prompt_completion_chat_read_hook": prompt_completion_chat_read_hook,
    "chat_read_hook": chat_read_hook,
    "dpo_read_hook": dpo_read_hook,
    "dpo_text_read_hook": dpo_text_read_hook,
}
"""The hooks of Model Zoo's module that are here, by name."""


def load_read_hook(path: str) -> Callable[..., Turns]:
    """The function ``path`` (``module:function``) names.

    :raises ValueError: not ``module:function``, a Model Zoo hook that is not here, or a module
        or function that cannot be imported.
    """
    module_name, _, name = path.rpartition(":")
    if not module_name or not name:
        raise ValueError(f"read_hook {path!r} must be written module:function")
    if module_name in (MODELZOO_MODULE, __name__):
        if name not in HOOKS:
            message = f"read hook {name!r} is not available here (available: {', '.join(HOOKS)})"
            raise ValueError(message)
        return HOOKS[name]
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"read_hook {path!r} cannot be imported: {exc}") from None
    if not callable(function):
        raise ValueError(f"read_hook {path!r} is not a function")  # noqa: TRY004 (one kind)
    return function  # type: ignore[no-any-return]
