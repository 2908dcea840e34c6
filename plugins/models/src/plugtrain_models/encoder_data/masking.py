"""BERT's dynamic masking, as Model Zoo's ``create_masked_lm_predictions`` does it.

Each sample gets its own ``random.Random``, seeded from ``shuffle_seed``, the epoch and the
sample's global index (:func:`sample_rng`): the masks of a sample never depend on which
samples this process drew before, so a resumed run, another number of processes or another
number of workers sees the same masks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import numpy as np

__all__ = ["Masked", "MaskingRule", "mask_tokens", "sample_rng", "whole_word_span"]


def sample_rng(seed: int, epoch: int, index: int) -> random.Random:
    """The generator of sample ``index`` in ``epoch`` (a string seed: hashed with SHA-512)."""
    return random.Random(f"{seed}/{epoch}/{index}")


@attrs.frozen
class MaskingRule:
    """What :func:`mask_tokens` needs besides the tokens.

    :param ids: token -> id (the vocabulary's ``id``).
    :param mask_id: the id of the mask token.
    :param vocab_size: the vocabulary's lines.
    :param exclude: tokens never selected (``[CLS]``, ``[SEP]``, ...).
    :param replacement_pool: ids a token may be replaced with (the vocabulary less ``exclude``).
    """

    max_sequence_length: int
    max_predictions_per_seq: int
    masked_lm_prob: float
    mask_id: int
    vocab_size: int
    exclude: frozenset[str]
    replacement_pool: Sequence[int]
    mask_whole_word: bool = False
    input_pad_id: int = 0
    attn_mask_pad_id: int = 0
    labels_pad_id: int = 0


@attrs.frozen
class Masked:
    """One masked sample, each array ``[max_sequence_length]`` int32."""

    input_ids: np.ndarray
    labels: np.ndarray
    attention_mask: np.ndarray
    masked_lm_mask: np.ndarray


def whole_word_span(tokens: Sequence[str], start: int) -> tuple[int, int]:
    """``[first, last + 1)`` of the word that token ``start`` belongs to (``##`` pieces)."""
    end = len(tokens)
    if start < len(tokens) - 1:
        end = min(start + 1, len(tokens) - 1)
        while tokens[end].startswith("##"):
            end += 1
            if end > len(tokens) - 1:
                break
    while tokens[start].startswith("##") and start > 0:
        start -= 1
    return start, end


def mask_tokens(
    tokens: Sequence[str], token_ids: Sequence[int], rule: MaskingRule, rng: random.Random
) -> Masked:
    """Select and corrupt about ``masked_lm_prob`` of the maskable tokens.

    Selected positions (never an excluded token, at most ``max_predictions_per_seq``) keep
    their original id in ``labels`` and become the mask token with probability 0.8, a random
    id of the replacement pool with 0.1, themselves with 0.1; the draws are Model Zoo's, in
    its order.
    """
    msl = rule.max_sequence_length
    input_ids = np.full(msl, rule.input_pad_id, dtype=np.int32)
    attention_mask = np.full(msl, rule.attn_mask_pad_id, dtype=np.int32)
    labels = np.full(msl, rule.labels_pad_id, dtype=np.int32)
    masked_lm_mask = np.zeros(msl, dtype=np.int32)
    count = len(token_ids)
    input_ids[:count] = token_ids
    attention_mask[:count] = 1

    wanted = min(rule.max_predictions_per_seq, max(1, round(count * rule.masked_lm_prob)))
    candidates = list(range(count))
    rng.shuffle(candidates)
    selected: list[int] = []
    predicted = 0
    while predicted < wanted:
        if not candidates or len(selected) >= rule.max_predictions_per_seq:
            break
        position = candidates[0]
        if tokens[position] in rule.exclude:
            candidates.pop(0)
            continue
        first, last = (
            whole_word_span(tokens, position) if rule.mask_whole_word else (position, position + 1)
        )
        for index in range(first, last):
            if index in candidates:
                candidates.remove(index)
        if len(selected) + last - first > rule.max_predictions_per_seq:
            continue  # only a whole word can overflow; it is skipped
        selected.extend(range(first, last))
        labels[first:last] = input_ids[first:last]
        predicted += last - first

    for position in selected:
        masked_lm_mask[position] = 1
        draw = rng.random()
        if draw < 0.8:
            input_ids[position] = rule.mask_id
        elif draw < 0.9:
            input_ids[position] = rng.choice(rule.replacement_pool)
    return Masked(input_ids, labels, attention_mask, masked_lm_mask)
