"""Where metrics go, and the progress display.

JSON lines and CSV under ``model_dir``, TensorBoard when installed, and a progress bar (tqdm) on
a terminal or plain log lines otherwise.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

__all__ = ["MetricsLog", "Progress"]

log = logging.getLogger("plugtrain")


class MetricsLog:
    """Appends metrics to ``metrics.jsonl`` and ``metrics.csv`` (long format) in ``directory``.

    :param directory: the run's ``model_dir``.
    :param tensorboard: also write TensorBoard events when ``tensorboard`` is installed.
    """

    def __init__(self, directory: Path, *, tensorboard: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = directory / "metrics.jsonl"
        self.csv_path = directory / "metrics.csv"
        new_csv = not self.csv_path.exists()
        self._jsonl: TextIO = self.jsonl_path.open("a", encoding="utf-8")
        self._csv_file: TextIO = self.csv_path.open("a", encoding="utf-8", newline="")
        self._csv = csv.writer(self._csv_file)
        if new_csv:
            self._csv.writerow(["step", "split", "name", "value"])
        self._board = _summary_writer(directory / "tensorboard") if tensorboard else None

    def write(self, step: int, split: str, values: dict[str, float]) -> None:
        """Record ``values`` of ``split`` (``train``/``val``) at ``step``."""
        record = {"step": step, "split": split, "time": round(time.time(), 3), **values}
        self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
        for name, value in values.items():
            self._csv.writerow([step, split, name, repr(value)])
            if self._board is not None:
                self._board.add_scalar(f"{split}/{name}", value, step)
        self._jsonl.flush()
        self._csv_file.flush()

    def close(self) -> None:
        """Flush and close every file."""
        self._jsonl.close()
        self._csv_file.close()
        if self._board is not None:
            self._board.close()


def _summary_writer(directory: Path) -> Any:
    try:
        import tensorboard  # noqa: F401 - only to know whether it is installed
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(directory))


def _format(values: dict[str, float]) -> str:
    parts = []
    for name, value in values.items():
        if isinstance(value, float) and (abs(value) < 1e-3 or abs(value) >= 1e4) and value != 0:
            parts.append(f"{name} {value:.3e}")
        elif isinstance(value, float) and math.isfinite(value):
            parts.append(f"{name} {value:.4f}")
        else:
            parts.append(f"{name} {value}")
    return " ".join(parts)


def _display(values: dict[str, float]) -> dict[str, float]:
    shown: dict[str, float] = {}
    for name, value in values.items():
        base, slash, _group = name.partition("/")
        if not slash:
            shown["steps/s" if name == "steps_per_second" else name] = value
        elif base == "lr" and "lr" not in shown:
            shown["lr"] = value
    return shown


class Progress:
    """A tqdm bar of optimizer steps on a terminal; log lines at each log step otherwise.

    :param total: the step the fit ends at.
    :param initial: the step it starts from.
    :param enabled: force the bar on or off; ``None``: on when stderr is a terminal.
    """

    def __init__(self, total: int, initial: int, enabled: bool | None = None) -> None:
        self.total = total
        use_bar = sys.stderr.isatty() if enabled is None else enabled
        self._bar = None
        if use_bar:
            try:
                from tqdm import tqdm
            except ImportError:
                use_bar = False
            else:
                self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def advance(self, step: int, values: dict[str, float] | None) -> None:
        """Move to ``step``; ``values`` (at log steps) are shown on the bar or logged.

        Per-group values are shown for the first group only; the metrics files have them all.
        """
        if values:
            values = _display(values)
            if self._bar is not None:
                values.pop("steps/s", None)  # the bar shows its own rate
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            if values:
                self._bar.set_postfix_str(_format(values), refresh=False)
        elif values:
            log.info("step %d/%d %s", step, self.total, _format(values))

    def message(self, text: str) -> None:
        """Print a line without breaking the bar."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            log.info("%s", text)

    def close(self) -> None:
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()
