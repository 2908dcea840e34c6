"""``truncate_to_msl``: cutting a too-long fine-tuning sample to ``max_seq_length`` tokens.

Model Zoo 2.10's ``truncate_sequence``: tokens are taken first from the prompt (or user) turns,
longest first, each keeping at least ``max_turn_length`` tokens (``keep_start`` cuts a turn's
end, ``keep_end`` its start); then, if that is not enough, from the completion (or assistant)
turns, longest first, always cutting their ends. Other regions (a system turn) are kept whole.
A sample that cannot lose enough this way is dropped. The first prompt region reaches back to
token 0 (a BOS in front of it is cut with it).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MODES", "truncate"]

MODES = ("keep_start", "keep_end")
"""The values of ``prompt_truncation_mode``."""

PAIRS = (("prompt", "completion"), ("user", "assistant"))

TokenRegion = tuple[str, int, int, float]
"""``(role, start token, end token, loss weight)``."""


def _cuts(
    spans: list[tuple[int, int]], need: int, turn: int, mode: str
) -> tuple[list[tuple[int, int]], int]:
    """Token ranges to remove from ``spans`` (longest first) and what is still needed."""
    removed = []
    for start, end in sorted(spans, key=lambda s: s[1] - s[0], reverse=True):
        if need <= 0:
            break
        available = (end - start) - turn
        if available <= 0:
            continue
        take = min(available, need)
        removed.append((end - take, end) if mode == "keep_start" else (start, start + take))
        need -= take
    return removed, need


def truncate(
    token_ids: Sequence[int],
    regions: Sequence[TokenRegion],
    msl: int,
    max_turn_length: int,
    mode: str,
) -> tuple[list[int], list[TokenRegion]] | None:
    """``token_ids`` cut to ``msl`` and the regions' new token ranges, or ``None`` (drop).

    :raises ValueError: an unknown ``mode``, or regions that are neither prompt/completion nor
        user/assistant.
    """
    if mode not in MODES:
        raise ValueError(f"prompt_truncation_mode must be one of {', '.join(MODES)}, not {mode!r}")
    roles = {role for role, *_ in regions}
    pair = next((p for p in PAIRS if set(p) <= roles), None)
    if pair is None:
        raise ValueError("truncation needs prompt/completion or user/assistant regions")
    first = [(s, e) for role, s, e, _ in regions if role == pair[0]]
    second = [(s, e) for role, s, e, _ in regions if role == pair[1]]
    if pair[0] == "prompt":
        first[0] = (0, first[0][1])
    need = len(token_ids) - msl
    removed, need = _cuts(first, need, max_turn_length, mode)
    if need > 0:
        more, need = _cuts(second, need, max_turn_length, "keep_start")
        if need > 0:
            return None
        removed += more
    keep = [True] * len(token_ids)
    for start, end in removed:
        keep[start:end] = [False] * (end - start)
    before = [0]
    for kept in keep:
        before.append(before[-1] + kept)
    kept_ids = [t for t, k in zip(token_ids, keep, strict=True) if k]
    moved = [(role, before[s], before[min(e, len(keep))], w) for role, s, e, w in regions]
    return kept_ids, moved
