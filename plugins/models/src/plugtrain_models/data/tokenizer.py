"""Tokenizers of ``plugtrain preprocess``: bytes, built in, or a local ``tokenizer.json``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from plugtrain.errors import MissingDependencyError, TrainingError

__all__ = ["BYTES", "Tokenizer", "load_tokenizer"]

BYTES = "bytes"
"""The built-in tokenizer's name: UTF-8 bytes 0-255, EOS = pad = 256."""

EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
"""Tokens taken as EOS from a ``tokenizer.json`` when ``--eos-id`` is not given, in order."""


@attrs.frozen
class Tokenizer:
    """Text to token ids, with the ids that end a document and pad a sequence.

    :param spec: what was asked for: ``bytes`` or the ``tokenizer.json`` path.
    :param vocab_size: number of ids.
    """

    spec: str
    eos_id: int
    pad_id: int
    vocab_size: int
    _encoder: Any = None

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (the tokenizer's own special tokens included)."""
        if self._encoder is None:
            return list(text.encode("utf-8"))
        return list(self._encoder.encode(text).ids)

    def encode_many(self, texts: Sequence[str]) -> list[np.ndarray]:
        """:meth:`encode` of each text as int32 arrays, a tokenizer.json's in one batch."""
        if self._encoder is None:
            return [
                np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.int32) for t in texts
            ]
        encodings = self._encoder.encode_batch(list(texts))
        return [np.array(e.ids, dtype=np.int32) for e in encodings]


def load_tokenizer(spec: str, eos_id: int | None = None, pad_id: int | None = None) -> Tokenizer:
    """``bytes``, or the Hugging Face ``tokenizer.json`` at path ``spec`` (or in folder ``spec``).

    :param eos_id: overrides the EOS id (default: 256 for bytes; a folder's ``eos_token``;
        else the first of :data:`EOS_CANDIDATES` in its vocabulary).
    :param pad_id: overrides the pad id (default: the EOS id).
    :raises MissingDependencyError: a ``tokenizer.json`` without the ``tokenizers`` package.
    :raises TrainingError: the file is missing, or no EOS id is known.
    """
    if spec == BYTES:
        eos = 256 if eos_id is None else eos_id
        return Tokenizer(BYTES, eos, eos if pad_id is None else pad_id, max(257, eos + 1))
    path = Path(spec)
    if path.is_dir() and (path / "tokenizer.json").is_file():  # a tokenizer folder
        if eos_id is None:
            from plugtrain_models.data.tokenizer_folder import TokenizerFolder

            eos_id = TokenizerFolder(path).token_id("eos_token")
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TrainingError(f"{spec}: no such tokenizer file (or write --tokenizer bytes)")
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError as exc:
        message = (
            f"{spec}: reading a tokenizer.json needs the tokenizers package: "
            "pip install 'plugtrain-models[tokenizers]'"
        )
        raise MissingDependencyError(message) from exc
    encoder = HFTokenizer.from_file(str(path))
    if eos_id is None:
        found = [encoder.token_to_id(t) for t in EOS_CANDIDATES]
        eos_id = next((i for i in found if i is not None), None)
        if eos_id is None:
            message = f"{spec}: no EOS token among {', '.join(EOS_CANDIDATES)}; give --eos-id"
            raise TrainingError(message)
    size = int(encoder.get_vocab_size(with_added_tokens=True))
    return Tokenizer(str(path), eos_id, eos_id if pad_id is None else pad_id, size, encoder)
