"""How many intra-op threads an elementwise optimizer step runs on.

A step cut into cache blocks (:mod:`plugtrain_optimizers._blocks`) runs hundreds of small
operations; with several intra-op threads each is a parallel region that ends only when every
thread has run, which on a busy machine costs far more than the cache saves, and unblocked the
step streams each tensor through memory once per operation. Where one thread already moves
memory about as fast as all of them (measured once per thread count by :func:`one_thread_suffices`),
a step runs on one thread, blocked. Elsewhere (many-core machines whose bandwidth grows with
threads) nothing changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["PROBE_ELEMENTS", "SAME_BANDWIDTH", "one_thread_suffices", "stepping_threads"]

PROBE_ELEMENTS = 1 << 24
"""float32 elements of each probe buffer (64 MiB: larger than a last-level cache)."""

SAME_BANDWIDTH = 1.25
"""One thread "suffices" if its copy takes at most this many times the all-threads copy."""

_verdicts: dict[int, bool] = {}


def _copy_seconds(dst: torch.Tensor, src: torch.Tensor, threads: int, repeats: int = 3) -> float:
    torch.set_num_threads(threads)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return best


def one_thread_suffices(threads: int | None = None) -> bool:
    """Whether one thread copies memory nearly as fast as ``threads`` (default: torch's count).

    Measured once per thread count with a 64 MiB ``copy_`` (best of three each way, after a
    warm-up) and cached; torch's thread count is left as it was.
    """
    threads = torch.get_num_threads() if threads is None else threads
    if threads <= 1:
        return True
    verdict = _verdicts.get(threads)
    if verdict is None:
        src = torch.ones(PROBE_ELEMENTS)
        dst = torch.empty_like(src)
        previous = torch.get_num_threads()
        try:
            dst.copy_(src)
            one = _copy_seconds(dst, src, 1)
            many = _copy_seconds(dst, src, threads)
        finally:
            torch.set_num_threads(previous)
        verdict = _verdicts[threads] = one <= SAME_BANDWIDTH * many
    return verdict


@contextmanager
def stepping_threads() -> Iterator[None]:
    """Run the body on one intra-op thread where :func:`one_thread_suffices`, else unchanged.

    Torch's thread count (with OpenMP, that of the calling thread) is restored on exit.
    """
    threads = torch.get_num_threads()
    if threads <= 1 or not one_thread_suffices(threads):
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
