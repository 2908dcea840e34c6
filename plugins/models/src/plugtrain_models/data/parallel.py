"""Batches of work in worker processes, their results taken back in order.

``setup.processes: N`` runs :meth:`ConfigRun.job <plugtrain_models.data.config_jobs.ConfigRun.job>`
on N worker processes. The main process reads the records and writes the files; results come
back in the order the batches were sent, so the files are the same for any N. One process runs
two batches at a time on two threads: while one waits for the tokenizer's threads (which
release the GIL), the other computes masks and compresses.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.pool import AsyncResult
from typing import Any, TypeVar

__all__ = ["ordered_map"]

Item = TypeVar("Item")
Result = TypeVar("Result")

IN_FLIGHT = 2
"""Batches queued per worker: enough to keep each busy, few enough to hold little."""

THREADS = 2
"""Threads of a one-process run."""

_worker_state: dict[str, Any] = {}


def _start_worker(make: Callable[..., Callable[[Any], Any]], args: tuple[Any, ...]) -> None:
    # One thread per worker: the N processes share the cores (tokenizers reads this each call).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_state["function"] = make(*args)


def _call(item: Any) -> Any:
    return _worker_state["function"](item)


def ordered_map(
    function: Callable[[Item], Result],
    make: Callable[..., Callable[[Item], Result]],
    args: tuple[Any, ...],
    items: Iterable[Item],
    processes: int,
) -> Iterator[Result]:
    """``function(item)`` of each item, in order.

    With ``processes`` 1 it runs here, on :data:`THREADS` threads (``function`` must allow
    that); otherwise each of ``processes`` workers builds its own ``make(*args)`` (the same
    function; ``make`` and ``args`` must pickle) and takes items as they come. At most
    :data:`IN_FLIGHT` items per worker are queued, so ``items`` is read as the results are
    used. An exception is raised here, at its item's turn.
    """
    if processes <= 1:
        with ThreadPoolExecutor(THREADS) as threads:
            yield from _in_order(
                lambda item: threads.submit(function, item), Future.result, items,
                IN_FLIGHT * THREADS,
            )  # fmt: skip
        return
    context = multiprocessing.get_context(_start_method())
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    # set while forking: a child of a process that used tokenizers' threads stays quiet
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        pool = context.Pool(processes, _start_worker, (make, args))
    finally:
        if saved is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved
    with pool:
        yield from _in_order(
            lambda item: pool.apply_async(_call, (item,)), AsyncResult.get, items,
            IN_FLIGHT * processes,
        )  # fmt: skip


def _start_method() -> str:
    """How worker processes start: fork, cheapest, until Python 3.12; then a fork server.

    From 3.12 on, forking a process that has threads (the tokenizer's) is deprecated.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and sys.version_info < (3, 12):
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _in_order(
    submit: Callable[[Any], Any], get: Callable[[Any], Any], items: Iterable[Any], window: int
) -> Iterator[Any]:
    """Submit each item, at most ``window`` pending; each result in turn."""
    pending: deque[Any] = deque()
    for item in items:
        pending.append(submit(item))
        if len(pending) >= window:
            yield get(pending.popleft())
    while pending:
        yield get(pending.popleft())
