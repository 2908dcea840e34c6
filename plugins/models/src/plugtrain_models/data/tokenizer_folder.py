"""A Hugging Face tokenizer folder read without transformers: ``tokenizers`` and ``jinja2``.

The folder holds ``tokenizer.json`` and, optionally, ``tokenizer_config.json`` (special tokens,
``chat_template``), ``special_tokens_map.json`` and ``chat_template.jinja`` (where transformers
5 saves the template). Encoding and chat rendering give what transformers' ``AutoTokenizer``
and ``apply_chat_template(..., tokenize=False)`` give for the same folder.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from plugtrain.errors import MissingDependencyError, TrainingError

__all__ = ["CHATML_TEMPLATE", "TokenizerFolder", "render_chat_template"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)
"""The ChatML template used when the tokenizer has none (Model Zoo's ``default_chat_template``)."""

SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token")
"""The special tokens a chat template sees by name, as transformers passes them."""

INSTALL = "pip install 'plugtrain-models[preprocess]'"


def _token_text(value: Any) -> str | None:
    """A special token as written in ``tokenizer_config.json``: a string or an AddedToken dict."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainingError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(content, dict):
        raise TrainingError(f"{path}: must hold a JSON object")
    return content


def _template_of(config: Mapping[str, Any], folder: Path) -> str | None:
    """The folder's default chat template: ``chat_template.jinja``, else the config's."""
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):  # [{name, template}, ...]: the one named "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    return template if isinstance(template, str) else None


@functools.lru_cache(maxsize=8)
def _compiled(template: str) -> Any:
    """``template`` compiled in transformers' sandboxed Jinja environment (once per text)."""
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:
        message = f"rendering a chat template needs the jinja2 package: {INSTALL}"
        raise MissingDependencyError(message) from exc

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:  # fmt: skip
        return json.dumps(
            value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
            sort_keys=sort_keys,
        )  # fmt: skip

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return environment.from_string(template)
    except jinja2.exceptions.TemplateError as exc:
        raise TrainingError(f"the chat template does not parse: {exc}") from None


def render_chat_template(
    template: str, messages: Sequence[Mapping[str, Any]], **variables: Any
) -> str:
    """``template`` rendered as transformers renders chat templates.

    A sandboxed Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the loop
    controls, ``raise_exception``, ``strftime_now`` and a ``tojson`` that keeps non-ASCII text.

    :raises MissingDependencyError: jinja2 is not installed.
    :raises TrainingError: the template raised an error or does not parse.
    """
    compiled = _compiled(template)
    import jinja2

    try:
        return str(compiled.render(messages=[dict(m) for m in messages], **variables))
    except jinja2.exceptions.TemplateError as exc:
        raise TrainingError(f"the chat template failed: {exc}") from None


def _refuse_code(folder: Path) -> None:
    """Refuse a folder whose ``tokenizer_config.json`` names its own Python (``auto_map``)."""
    config_file = folder / "tokenizer_config.json"
    if "auto_map" in _read_json(config_file):
        message = (
            f"{config_file}: 'auto_map' names Python code in the tokenizer folder, and plugtrain "
            "never runs a folder's code: save the tokenizer as a tokenizer.json (its fast "
            "form, save_pretrained where you trust that code) and remove 'auto_map'"
        )
        raise TrainingError(message)


class TokenizerFolder:
    """A local tokenizer folder: encode with offsets, special tokens, the chat template.

    :param folder: the folder (or its ``tokenizer.json`` file).
    :param chat_template: replaces the folder's template (Model Zoo's ``dataset.chat_template``).
    :raises TrainingError: no ``tokenizer.json`` there, or ``auto_map`` in its
        ``tokenizer_config.json`` (code of the folder, never run).
    :raises MissingDependencyError: the ``tokenizers`` package is missing.
    """

    def __init__(self, folder: str | Path, chat_template: str | None = None) -> None:
        path = Path(folder)
        self.folder = path.parent if path.is_file() else path
        file = path if path.is_file() else path / "tokenizer.json"
        if not file.is_file():
            message = (
                f"{folder}: no tokenizer.json there (a local Hugging Face tokenizer folder is "
                "needed; save one with tokenizer.save_pretrained(FOLDER))"
            )
            raise TrainingError(message)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            message = f"{folder}: reading a tokenizer needs the tokenizers package: {INSTALL}"
            raise MissingDependencyError(message) from exc
        _refuse_code(self.folder)
        self._tokenizer = Tokenizer.from_file(str(file))
        config = {
            **_read_json(self.folder / "special_tokens_map.json"),
            **_read_json(self.folder / "tokenizer_config.json"),
        }
        self.special_tokens: dict[str, str] = {}
        for name in SPECIAL_NAMES:
            text = _token_text(config.get(name))
            if text is not None:
                self.special_tokens[name] = text
        self.chat_template = chat_template or _template_of(config, self.folder)

    def __repr__(self) -> str:
        return f"TokenizerFolder({str(self.folder)!r})"

    @property
    def vocab_size(self) -> int:
        """Ids in use, added tokens included (``len(tokenizer)`` in transformers)."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def token_id(self, name: str) -> int | None:
        """The id of special token ``name`` (``eos_token``...), ``None`` when it has none."""
        text = self.special_tokens.get(name)
        return None if text is None else self._tokenizer.token_to_id(text)

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a vocabulary entry or an added token), ``None`` if unknown."""
        found: int | None = self._tokenizer.token_to_id(token)
        return found

    def id_to_token(self, token_id: int) -> str | None:
        """The token string of ``token_id``."""
        token: str | None = self._tokenizer.id_to_token(token_id)
        return token

    def encode(
        self, text: str, *, add_special_tokens: bool = True
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` and each token's ``(start, end)`` character offsets."""
        encoding = self._tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(encoding.ids), [(int(s), int(e)) for s, e in encoding.offsets]

    def encode_batch_flat(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The texts encoded in parallel, their tokens laid end to end.

        Returns the ids (int32), each token's start and end character (int64), and ``bounds``:
        text ``k``'s tokens are ``bounds[k]:bounds[k + 1]``.
        """
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        ids = [encoding.ids for encoding in encodings]
        bounds = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum([len(i) for i in ids], out=bounds[1:])
        total = int(bounds[-1])
        flat_ids = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=total)
        pairs = itertools.chain.from_iterable(encoding.offsets for encoding in encodings)
        flat = np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * total)
        offsets = flat.reshape(-1, 2)
        return flat_ids, offsets[:, 0], offsets[:, 1], bounds

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text (special tokens added), encoded in parallel."""
        return [list(e.ids) for e in self._tokenizer.encode_batch(list(texts))]

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The conversation as text (no generation prompt), as transformers renders it.

        :raises TrainingError: the folder has no chat template (and none was given).
        """
        if self.chat_template is None:
            raise TrainingError(f"{self.folder}: the tokenizer has no chat_template")
        return render_chat_template(
            self.chat_template, messages, add_generation_prompt=False, **self.special_tokens
        )
