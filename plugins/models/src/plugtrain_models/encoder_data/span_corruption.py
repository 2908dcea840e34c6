"""T5's span corruption, as Model Zoo's ``t5_utils`` does it (numpy, torch-free)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "corrupt",
    "random_chunk",
    "raw_lengths",
    "spans_noise_mask",
    "split_sequences",
]

NOISE_DENSITY = 0.15
MEAN_SPAN = 3.0
MAX_CHUNK = 65536
"""A longer document is cut to one random chunk of this many tokens."""


def random_chunk(tokens: list[int], rng: np.random.Generator) -> list[int]:
    """One random chunk of at most :data:`MAX_CHUNK` tokens (the whole of a shorter one).

    As Model Zoo, a draw is taken for every non-empty document.
    """
    segments = math.ceil(len(tokens) / MAX_CHUNK)
    if not segments:
        return tokens
    start = MAX_CHUNK * int(rng.uniform(0, segments - 1e-5))
    return tokens[start : min(start + MAX_CHUNK, len(tokens))]


def split_sequences(tokens: Sequence[int], length: int) -> list[list[int]]:
    """``tokens`` in consecutive pieces of ``length`` (the last one shorter)."""
    return [list(tokens[start : start + length]) for start in range(0, len(tokens), length)]


def raw_lengths(max_sequence_length: int) -> tuple[int, int]:
    """``(raw, target)``: the longest raw piece whose corrupted input fits, and its target."""

    def after(raw: int) -> tuple[int, int]:
        noise = round(raw * NOISE_DENSITY)
        spans = round(noise / MEAN_SPAN)
        return raw - noise + spans + 1, noise + spans + 1

    raw = max_sequence_length
    while after(raw)[0] < max_sequence_length:
        raw += 1
    return raw, after(raw)[1]


def _segmentation(items: int, segments: int, rng: np.random.Generator) -> np.ndarray:
    """``items`` split at random into ``segments`` non-empty runs; their lengths."""
    first = np.arange(items - 1) < segments - 1
    rng.shuffle(first)
    ids = np.cumsum(np.pad(first, [[1, 0]]))
    return np.bincount(ids, minlength=segments).astype(np.int32)


def spans_noise_mask(length: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask of ``length``: alternating runs of kept and noise tokens, kept first.

    ``round(length·0.15)`` noise tokens (at least 1, at most length - 1) in
    ``round(noise/3)`` spans (at least 1); every such mask is equally likely.
    """
    original = length
    length = max(length, 2)
    noise = min(max(round(length * NOISE_DENSITY), 1), length - 1)
    spans = max(round(noise / MEAN_SPAN), 1)
    noise_lengths = _segmentation(noise, spans, rng)
    kept_lengths = _segmentation(length - noise, spans, rng)
    interleaved = np.stack([kept_lengths, noise_lengths], axis=1).reshape(-1)
    starts = np.zeros(length, dtype=np.int32)
    np.add.at(starts, np.cumsum(interleaved)[:-1], 1)
    return (np.cumsum(starts) % 2 == 1)[:original]


def _sentinels(tokens: np.ndarray, mask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Each run of masked tokens replaced by one sentinel, counting down from vocab_size - 1."""
    previous = np.pad(mask[:-1], [[1, 0]])
    first = mask & ~previous
    following = mask & previous
    sentinel = vocab_size - np.cumsum(first)
    return np.where(first, sentinel, tokens)[~following]


def corrupt(
    tokens: Sequence[int], vocab_size: int, eos_id: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, labels)`` of one raw piece, both ending with ``eos_id``.

    The input has a sentinel in place of each noise span, the target each sentinel followed by
    its span.

    :param vocab_size: the vocabulary's size plus ``extra_ids``.
    """
    array = np.asarray(tokens, dtype=np.int64)
    noise = spans_noise_mask(len(array), rng)
    inputs = _sentinels(array, noise, vocab_size)
    targets = _sentinels(array, ~noise, vocab_size)
    return np.append(inputs, eos_id), np.append(targets, eos_id)
