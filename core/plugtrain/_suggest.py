"""Did-you-mean suggestions for misspelt names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_matches", "did_you_mean"]


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` candidates closest to ``word``, ignoring case, best first."""
    by_lower: dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=limit, cutoff=0.6)
    return [by_lower[match] for match in found]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" Did you mean 'X'?"`` (or ``'X' or 'Y'``) for close candidates, else ``""``.

    The text starts with a space so that it can follow a finished sentence.
    """
    matches = close_matches(word, candidates)
    if not matches:
        return ""
    quoted = [f"'{m}'" for m in matches]
    joined = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" Did you mean {joined}?"
