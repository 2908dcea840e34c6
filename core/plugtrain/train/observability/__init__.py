"""What a run shows and records: console lines, loggers, metrics, throughput, the profiler.

The two default loggers and their metrics files, the one-line fit summary, tokens/s and MFU, the
profiler window, and what a failing callback or logger costs (nothing, or one clear stop).
"""

from __future__ import annotations

from plugtrain.train.observability.console import console_logging, say_inert_off_csx, say_once
from plugtrain.train.observability.failures import Failures, allow_failures, describe_failure
from plugtrain.train.observability.loggers import (
    DEFAULT_CALLBACKS,
    DEFAULT_LOGGERS,
    Loggers,
    MetricsFilesLogger,
    ProgressLogger,
    assemble,
)
from plugtrain.train.observability.profiling import profiler_callbacks
from plugtrain.train.observability.throughput import Throughput, loss_tokens_in, token_counter

__all__ = [
    "DEFAULT_CALLBACKS",
    "DEFAULT_LOGGERS",
    "Failures",
    "Loggers",
    "MetricsFilesLogger",
    "ProgressLogger",
    "Throughput",
    "allow_failures",
    "assemble",
    "console_logging",
    "describe_failure",
    "loss_tokens_in",
    "profiler_callbacks",
    "say_inert_off_csx",
    "say_once",
    "token_counter",
]
