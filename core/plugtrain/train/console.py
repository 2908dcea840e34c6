"""Log lines on stderr for a ``Trainer`` used from Python, as ``plugtrain fit`` shows them."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["console_logging"]


@contextmanager
def console_logging(level: str | None) -> Iterator[None]:
    """Show plugtrain's log lines on stderr for the block, unless logging is configured.

    A program that configured logging (a handler on the ``plugtrain`` logger or on the root
    logger, as ``logging.basicConfig`` or pytest adds) keeps its own; otherwise the lines go
    to stderr as ``plugtrain: message``, at ``level`` (the run's ``logging.log_level``; set it
    to ``WARNING`` for a quiet run).
    """
    logger = logging.getLogger("plugtrain")
    if logger.handlers or logging.getLogger().handlers:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("plugtrain: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(level or logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
