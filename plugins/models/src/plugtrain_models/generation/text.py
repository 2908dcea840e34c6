"""Text to ids and back for generation and evaluation: a Hugging Face folder or bytes.

A folder is read from its ``tokenizer.json`` with the ``tokenizers`` package (special tokens and
chat template from ``tokenizer_config.json``, as preprocessing reads them); no code of the
folder ever runs (a folder naming its own Python classes in ``auto_map`` is refused). ``bytes``
is plugtrain's byte tokenizer (UTF-8 bytes 0-255, EOS = 256).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from plugtrain.errors import MissingDependencyError, TrainingError

__all__ = [
    "BYTES",
    "FolderTokenizer",
    "TextTokenizer",
    "has_tokenizer_files",
    "load_text_tokenizer",
]

BYTES = "bytes"
"""The byte tokenizer's name."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Any of these in a folder makes it a tokenizer folder."""


def has_tokenizer_files(folder: str | Path) -> bool:
    """Whether ``folder`` is a directory holding a Hugging Face tokenizer."""
    path = Path(folder)
    return path.is_dir() and any((path / name).is_file() for name in TOKENIZER_FILES)


@attrs.frozen
class TextTokenizer:
    """Encode and decode text.

    ``hf`` is the folder's :class:`FolderTokenizer` (``None`` for bytes or a bare
    ``tokenizer.json``).
    """

    name: str
    eos_id: int | None
    pad_id: int
    _encode: Callable[[str, bool], list[int]]
    _decode: Callable[[list[int]], str]
    hf: Any = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The ids of ``text``, with the tokenizer's own BOS/EOS when ``add_special_tokens``."""
        return self._encode(text, add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, special tokens left out."""
        return self._decode(ids)


def _bytes() -> TextTokenizer:
    def encode(text: str, _special: bool) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    return TextTokenizer(BYTES, 256, 256, encode, decode)


def _folder(folder: Path, eos_id: int | None) -> TextTokenizer:
    from plugtrain_models.data.tokenizer_folder import TokenizerFolder

    read = TokenizerFolder(folder)
    view = FolderTokenizer(read)
    eos = view.eos_token_id if eos_id is None else eos_id
    if eos is None:
        eos = _eos_from_config(read.folder, read)
    pad = view.pad_token_id if view.pad_token_id is not None else (eos if eos is not None else 0)

    def encode(text: str, special: bool) -> list[int]:
        return read.encode(text, add_special_tokens=special)[0]

    def decode(ids: list[int]) -> str:
        return view.decode(ids, skip_special_tokens=True)

    return TextTokenizer(str(folder), eos, pad, encode, decode, view)


class FolderTokenizer:
    """What lm-eval and generation read of a tokenizer, from a :class:`TokenizerFolder`.

    The attributes transformers' tokenizers have under the same names (``bos_token``,
    ``bos_token_id``, ``decode``, ``apply_chat_template``), computed without transformers.
    """

    def __init__(self, folder: Any) -> None:
        self.folder = folder
        self.bos_token: str | None = folder.special_tokens.get("bos_token")
        self.bos_token_id: int | None = folder.token_id("bos_token")
        self.eos_token_id: int | None = folder.token_id("eos_token")
        self.pad_token_id: int | None = folder.token_id("pad_token")

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of ``ids``."""
        tokenizer = self.folder._tokenizer
        return str(tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
    ) -> str:
        """The conversation rendered with the folder's chat template, as text.

        ``continue_final_message`` ends the text with the last message's content (its closing
        tokens cut), as transformers does.

        :raises TrainingError: the folder has no chat template, or ``tokenize`` is asked for.
        """
        from plugtrain_models.data.tokenizer_folder import render_chat_template

        if tokenize:
            raise TrainingError("apply_chat_template gives text only (tokenize=False)")
        if self.folder.chat_template is None:
            raise TrainingError(f"{self.folder.folder}: the tokenizer has no chat_template")
        rendered = render_chat_template(
            self.folder.chat_template, messages, add_generation_prompt=add_generation_prompt,
            **self.folder.special_tokens,
        )  # fmt: skip
        if continue_final_message and messages:
            last = str(messages[-1].get("content", "")).strip()
            at = rendered.rfind(last)
            if last and at >= 0:
                rendered = rendered[: at + len(last)]
        return rendered


def _tokenizers(file: Path, eos_id: int | None) -> TextTokenizer:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        message = "reading a tokenizer.json needs the tokenizers package"
        raise MissingDependencyError(
            f"{message}: pip install 'plugtrain-models[tokenizers]'"
        ) from exc
    tokenizer = Tokenizer.from_file(str(file))
    if eos_id is None:
        eos_id = _eos_from_config(file.parent, tokenizer)

    def encode(text: str, special: bool) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=special).ids)

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True))

    return TextTokenizer(str(file), eos_id, 0 if eos_id is None else eos_id, encode, decode)


def _eos_from_config(folder: Path, tokenizer: Any) -> int | None:
    config = folder / "tokenizer_config.json"
    token = None
    if config.is_file():
        token = json.loads(config.read_text()).get("eos_token")
        token = token.get("content") if isinstance(token, dict) else token
    for candidate in (token, "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"):
        if candidate is not None and tokenizer.token_to_id(candidate) is not None:
            return int(tokenizer.token_to_id(candidate))
    return None


def load_text_tokenizer(spec: str | Path, eos_id: int | None = None) -> TextTokenizer:
    """The tokenizer ``spec`` names: ``bytes``, a tokenizer folder or a ``tokenizer.json``.

    :param eos_id: overrides the tokenizer's EOS id (Model Zoo's ``eos_id``).
    :raises TrainingError: ``spec`` is none of these.
    """
    if str(spec) == BYTES:
        made = _bytes()
    else:
        path = Path(spec)
        if path.is_file() and path.suffix == ".json":
            made = _tokenizers(path, eos_id)
        elif has_tokenizer_files(path):
            made = _folder(path, eos_id)
        else:
            message = f"{spec}: not a tokenizer folder, tokenizer.json or 'bytes'"
            raise TrainingError(f"{message} (a folder needs one of {', '.join(TOKENIZER_FILES)})")
    if eos_id is not None:
        made = attrs.evolve(made, eos_id=eos_id)
    return made
