"""Log lines on stderr for a ``Trainer`` used from Python, as ``plugtrain fit`` shows them."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from plugtrain.config.sections import LoggingSettings

__all__ = ["console_logging", "say_inert_off_csx", "say_once"]

log = logging.getLogger("plugtrain")


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


_SAID: set[str] = set()


def say_once(key: str, message: str) -> None:
    """Log ``message`` at INFO once per process for ``key``."""
    if key not in _SAID:
        _SAID.add(key)
        log.info(message)


def say_inert_off_csx(backend: Any, settings: LoggingSettings) -> None:
    """Say once which logging settings only a cluster backend (CSX) acts on."""
    if getattr(backend, "cluster_logging", False):
        return
    backend_type = backend.backend_type
    if settings.wsc_log_level:
        say_once(
            "wsc_log_level",
            f"logging.wsc_log_level has no effect on {backend_type}: it sets the log levels "
            "of Wafer-Scale Cluster servers, which only a CSX run has",
        )
    if settings.enable_act_frequency:
        say_once(
            "enable_act_frequency",
            f"logging.enable_act_frequency has no effect on {backend_type}: it spaces "
            "activation transfers from a CS system, which only a CSX run has",
        )
