"""Model Zoo's vocabulary files: one token per line, the id is the line number (torch-free)."""

from __future__ import annotations

from collections.abc import Iterable

from plugtrain.errors import TrainingError

__all__ = ["Vocabulary"]


class Vocabulary:
    """A token -> id map read from a vocabulary file, as Model Zoo's ``build_vocab``.

    Each line is stripped (lower-cased with ``do_lower``); a token written twice keeps its
    last line's id; an unknown token maps to ``oov_token``'s id.

    :param path: the vocabulary file.
    :raises TrainingError: the file is empty, or ``oov_token`` is not in it.
    """

    def __init__(self, path: str, *, do_lower: bool = False, oov_token: str = "[UNK]") -> None:
        with open(path, encoding="utf-8", errors="ignore") as file:
            words = [line.strip() for line in file]
        if do_lower:
            words = [word.lower() for word in words]
            oov_token = oov_token.lower()
        if not words:
            raise TrainingError(f"{path}: the vocabulary file is empty")
        self.path = path
        self.size = len(words)
        self.words = words
        self.ids = {word: index for index, word in enumerate(words)}
        if oov_token not in self.ids:
            message = f"{path}: the out-of-vocabulary token {oov_token!r} is not in the file"
            raise TrainingError(message)
        self.oov_id = self.ids[oov_token]

    def __contains__(self, token: str) -> bool:
        return token in self.ids

    def id(self, token: str) -> int:
        """The id of ``token`` (the out-of-vocabulary id when it is unknown)."""
        return self.ids.get(token, self.oov_id)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """The ids of ``tokens``."""
        get, oov = self.ids.get, self.oov_id
        return [get(token, oov) for token in tokens]
