"""Batches of work in worker processes, their results taken back in order.

``setup.processes: N`` runs :meth:`ConfigRun.job <plugtrain_models.data.config_jobs.ConfigRun.job>`
on N worker processes. The main process reads the records and writes the files; results come
back in the order the batches were sent, so the files are the same for any N.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["ordered_map"]

Item = TypeVar("Item")
Result = TypeVar("Result")

IN_FLIGHT = 2
"""Batches queued per worker: enough to keep each busy, few enough to hold little."""

_worker_state: dict[str, Any] = {}


def _start_worker(make: Callable[..., Callable[[Any], Any]], args: tuple[Any, ...]) -> None:
    # One thread per worker: the N processes share the cores (tokenizers reads this each call).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_state["function"] = make(*args)


def _call(item: Any) -> Any:
    return _worker_state["function"](item)


def ordered_map(
    make: Callable[..., Callable[[Item], Result]],
    args: tuple[Any, ...],
    items: Iterable[Item],
    processes: int,
) -> Iterator[Result]:
    """``function(item)`` of each item, in order, with ``function = make(*args)``.

    With ``processes`` 1 it runs here; otherwise each of ``processes`` workers calls
    ``make(*args)`` once (``make`` and ``args`` must pickle) and takes items as they come, at
    most :data:`IN_FLIGHT` per worker queued, so ``items`` is read as the results are used.
    A worker's exception is raised here, at its item's turn.
    """
    if processes <= 1:
        function = make(*args)
        yield from (function(item) for item in items)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
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
        pending: deque[Any] = deque()
        for item in items:
            pending.append(pool.apply_async(_call, (item,)))
            if len(pending) >= IN_FLIGHT * processes:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
