"""Did-you-mean suggestions for misspelt names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["MODEL_ZOO_ONLY", "close_matches", "did_you_mean"]

MODEL_ZOO_ONLY: dict[tuple[str, str], str] = {
    ("InitSection", "autorestart"): (
        "'autorestart' is the CSX appliance's automatic restart, which plugtrain does not "
        "have; a plugtrain fit resumes from its newest checkpoint when run again"
    ),
    ("RunFile", "train_input"): (
        "'train_input' is Model Zoo's pre-2.0 params format, which plugtrain does not read; "
        "write the run file in the trainer: format (cszoo config convert converts one)"
    ),
    ("RunFile", "eval_input"): (
        "'eval_input' is Model Zoo's pre-2.0 params format, which plugtrain does not read; "
        "write the run file in the trainer: format (cszoo config convert converts one)"
    ),
    ("RunFile", "runconfig"): (
        "'runconfig' is Model Zoo's pre-2.0 params format, which plugtrain does not read; "
        "write the run file in the trainer: format (cszoo config convert converts one)"
    ),
}
"""Keys Model Zoo has and plugtrain does not, by schema class name: said plainly when written."""


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` candidates closest to ``word``, ignoring case, best first."""
    by_lower: dict[str, str] = {}
    for candidate in candidates:
        by_lower.setdefault(candidate.lower(), candidate)
    found = difflib.get_close_matches(word.lower(), list(by_lower), n=limit, cutoff=0.6)
    return [by_lower[match] for match in found]


def _may_mean(word: str, candidate: str) -> bool:
    """Whether ``candidate`` could be what ``word`` meant, not another key that looks alike.

    ``validate_all`` is not a misspelt ``validate`` nor ``adjust_learning_rate`` a misspelt
    ``learning_rate``: one key is the other with words added. Two keys of several words each
    that are not very alike (``disable_strict_checkpoint_loading``, ``save_initial_checkpoint``)
    name different things.
    """
    words, other = set(word.lower().split("_")), set(candidate.lower().split("_"))
    if words != other and (words < other or other < words):
        return False
    alike = difflib.SequenceMatcher(None, word.lower(), candidate.lower()).ratio()
    return not (len(words) > 1 and len(other) > 1 and alike < 0.75)


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``" Did you mean 'X'?"`` (or ``'X' or 'Y'``) for close candidates, else ``""``.

    The text starts with a space so that it can follow a finished sentence. A candidate that
    is another key looking alike (:func:`_may_mean`) is not suggested.
    """
    matches = [m for m in close_matches(word, candidates) if _may_mean(word, m)]
    if not matches:
        return ""
    quoted = [f"'{m}'" for m in matches]
    joined = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f" Did you mean {joined}?"
