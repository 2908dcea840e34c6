"""Model Zoo's ``FullTokenizer``: BERT's basic tokenization, then WordPiece (torch-free).

The basic step cleans the text (drops NUL, U+FFFD and control characters, tabs and
newlines among them, and turns every other space character into a space), puts spaces around
CJK ideographs, splits on spaces (lower-casing with ``do_lower``), strips accents (always, as
Model Zoo does) and splits off each punctuation character. WordPiece then splits each word
greedily into the longest pieces of the vocabulary (``##`` marks a continuation); a word with
no split, or longer than 200 characters, becomes the unknown token.
"""

from __future__ import annotations

import unicodedata

__all__ = ["FullTokenizer"]

MAX_WORD_CHARS = 200
"""Longer words become the unknown token (Model Zoo's ``max_input_chars_per_word``)."""

_CJK = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)  # fmt: skip


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _clean(text: str) -> str:
    # Model Zoo drops every control character, tabs and newlines included (BERT's original
    # turned those into spaces), then turns the remaining spaces (category Zs) into " ".
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "\x00\ufffd" or category in ("Cc", "Cf"):
            continue
        kept.append(" " if char == " " or category == "Zs" else char)
    return "".join(kept)


def _space_cjk(text: str) -> str:
    return "".join(
        f" {char} " if any(lo <= ord(char) <= hi for lo, hi in _CJK) else char for char in text
    )


def _strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def _split_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    start_new = True
    for char in word:
        if _is_punctuation(char):
            pieces.append(char)
            start_new = True
        else:
            if start_new:
                pieces.append("")
            start_new = False
            pieces[-1] += char
    return pieces


class FullTokenizer:
    """Text -> WordPiece tokens with the words of a vocabulary.

    :param words: the vocabulary's tokens (lower-cased already when ``do_lower``).
    :param do_lower: lower-case the text.
    :param unknown_token: the token of a word WordPiece cannot split.
    """

    def __init__(self, words: list[str], *, do_lower: bool, unknown_token: str = "[UNK]") -> None:
        self.words = set(words)
        self.do_lower = do_lower
        self.unknown_token = unknown_token  # never lower-cased, as in Model Zoo

    def basic(self, text: str) -> list[str]:
        """The words and punctuation of ``text`` (BERT's basic tokenization)."""
        text = _space_cjk(_clean(text))
        if self.do_lower:
            text = text.lower()
        words: list[str] = []
        for word in text.split(" "):
            if word:
                words.extend(p for p in _split_punctuation(_strip_accents(word)) if p)
        return words

    def wordpiece(self, word: str) -> list[str]:
        """``word`` as the longest vocabulary pieces, left to right, or the unknown token."""
        if len(word) > MAX_WORD_CHARS:
            return [self.unknown_token]
        pieces: list[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.words:
                    break
                end -= 1
            else:
                return [self.unknown_token]
            pieces.append(piece)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """``text`` as WordPiece tokens."""
        return [piece for word in self.basic(text) for piece in self.wordpiece(word)]
