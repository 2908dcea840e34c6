"""StdoutLogger: a logger written against plugtrain.protocols.Logger."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from acme_plugtrain_callbacks.schemas import StdoutLoggerArgs
from plugtrain.schema import validated_arguments


class StdoutLogger:
    """Prints ``<prefix> step <step> <split> name=value ...`` for each record (main process).

    :param prefix: what each line starts with.
    :param digits: digits after the decimal point.
    """

    def __init__(self, prefix: str = "acme", digits: int = 4) -> None:
        checked = validated_arguments(
            StdoutLoggerArgs, {"prefix": prefix, "digits": digits}, owner="StdoutLogger"
        )
        self.prefix: str = checked["prefix"]
        self.digits: int = checked["digits"]
        self.lines = 0

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Print one line."""
        values = " ".join(f"{name}={value:.{self.digits}f}" for name, value in metrics.items())
        print(f"{self.prefix} step {step} {split} {values}", file=sys.stdout, flush=True)
        self.lines += 1

    def close(self) -> None:
        """Print how many records were shown."""
        print(f"{self.prefix} closed after {self.lines} records", file=sys.stdout, flush=True)
        self.lines = 0
