"""Where metrics go, and the progress display.

JSON lines and CSV under ``model_dir`` and a progress bar (tqdm) on a terminal or plain log lines
otherwise; the loggers of :mod:`.loggers` use them.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["CSV_HEADER", "MetricsLog", "Progress", "set_aside_metrics", "truncate_metrics"]

log = logging.getLogger("plugtrain")

CSV_HEADER = ("step", "split", "name", "value")
"""The columns of ``metrics.csv``."""


class MetricsLog:
    """Appends metrics to ``metrics.jsonl`` and ``metrics.csv`` (long format) in ``directory``.

    :param directory: the run's ``model_dir``.
    :param resume_step: a fit resuming from this step: rows of later steps (written before an
        interruption, about to be replayed) and a partial last line are removed first.
    """

    def __init__(self, directory: Path, *, resume_step: int | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = directory / "metrics.jsonl"
        self.csv_path = directory / "metrics.csv"
        if resume_step is not None:
            truncate_metrics(directory, resume_step)
        header = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        self._jsonl: TextIO = self.jsonl_path.open("a", encoding="utf-8")
        self._csv_file: TextIO = self.csv_path.open("a", encoding="utf-8", newline="")
        self._csv = csv.writer(self._csv_file)
        if header:
            self._csv.writerow(CSV_HEADER)
            self._csv_file.flush()

    def write(self, step: int, split: str, values: dict[str, float]) -> None:
        """Record ``values`` of ``split`` (``train``/``val``) at ``step``."""
        record = {"step": step, "split": split, "time": round(time.time(), 3), **values}
        self._jsonl.write(json.dumps(record, allow_nan=True) + "\n")
        for name, value in values.items():
            self._csv.writerow([step, split, name, repr(value)])
        self._jsonl.flush()
        self._csv_file.flush()

    def close(self) -> None:
        """Flush and close every file."""
        self._jsonl.close()
        self._csv_file.close()


def _keep_rows(path: Path, keep: Callable[[str], bool], header: str | None = None) -> int:
    """Rewrite ``path`` (atomically) with the complete lines ``keep`` accepts; count the rest.

    With ``header``, a first line equal to it is always kept and written when missing.
    """
    if not path.exists():
        return 0
    dropped = 0
    changed = False
    temporary = path.with_name(f".{path.name}.truncating")
    with (
        path.open(encoding="utf-8", errors="replace", newline="") as source,
        temporary.open("w", encoding="utf-8", newline="") as target,
    ):
        first = header is not None
        for line in source:
            if first:
                first = False
                target.write(f"{header}\r\n")
                if line.rstrip("\r\n") == header:
                    continue
                changed = True
            if line.endswith("\n") and keep(line):
                target.write(line)
            else:
                dropped += 1
    if dropped or changed:
        shutil.copymode(path, temporary)
        os.replace(temporary, path)
    else:
        temporary.unlink()
    return dropped


def _jsonl_step(line: str) -> int | None:
    try:
        record = json.loads(line)
        return int(record["step"])
    except (ValueError, TypeError, KeyError):
        return None


def _csv_step(line: str) -> int | None:
    try:
        (row,) = csv.reader([line])
        return int(row[0]) if len(row) == len(CSV_HEADER) else None
    except (ValueError, csv.Error):
        return None


def set_aside_metrics(directory: Path) -> list[Path]:
    """Rename the metrics files of an earlier run to ``metrics.before-YYYYmmdd-HHMMSS.*``.

    A fit that does not continue this folder's own checkpoint (it starts from scratch, or
    fine-tunes from another folder's) begins a new series of steps; the earlier rows keep
    their own files instead of being cut or mixed with the new ones. Returns the new paths.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    for name in ("metrics.jsonl", "metrics.csv"):
        path = directory / name
        if not path.exists() or path.stat().st_size == 0:
            continue
        suffix = "".join(path.suffixes)
        target = directory / f"metrics.before-{stamp}{suffix}"
        index = 1
        while target.exists():
            index += 1
            target = directory / f"metrics.before-{stamp}-{index}{suffix}"
        path.rename(target)
        moved.append(target)
    return moved


def truncate_metrics(directory: Path, step: int) -> int:
    """Drop the metrics rows of steps after ``step`` (and partial lines); returns how many.

    A fit resuming from the checkpoint of ``step`` replays the later steps: without this they
    would appear twice.
    """

    def before(read: Callable[[str], int | None]) -> Callable[[str], bool]:
        def keep(line: str) -> bool:
            found = read(line)
            return found is not None and found <= step

        return keep

    dropped = _keep_rows(directory / "metrics.jsonl", before(_jsonl_step))
    dropped += _keep_rows(directory / "metrics.csv", before(_csv_step), ",".join(CSV_HEADER))
    if dropped:
        log.info("metrics: removed %d rows after step %d (replayed on resuming)", dropped, step)
    return dropped


def significant(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits: ``0.0003``, ``2.302``, ``1.5e+04``."""
    if not isinstance(value, float) or not math.isfinite(value):
        return str(value)
    return f"{value:.{digits}g}"


def _format(values: dict[str, float]) -> str:
    return " ".join(f"{name} {significant(value)}" for name, value in values.items())


def _display(values: dict[str, float]) -> dict[str, float]:
    shown: dict[str, float] = {}
    for name, value in values.items():
        base, slash, _group = name.partition("/")
        if not slash:
            shown["steps/s" if name == "steps_per_second" else name] = value
        elif base == "lr" and "lr" not in shown:
            shown["lr"] = value
        elif name in _DEVICE_RATES:
            shown[_DEVICE_RATES[name]] = value
    return shown


_DEVICE_RATES = {"device/tokens_per_sec": "tokens/s", "device/mfu": "mfu"}
"""The Throughput callback's metrics that log lines show, and their short names."""


BAR_FORMAT = "{n_fmt}/{total_fmt} |{bar:16}| {rate_fmt} eta {remaining}{postfix}"
"""Step/total, a bar of fixed width, the rate and the time left, then loss and lr: at most
80 columns for runs of up to 99,999 steps; every other value is in the metrics files."""


def _bar_values(values: dict[str, float]) -> str:
    """``loss 2.302 lr 0.0003``: what the bar shows of a training record (after a comma)."""
    shown = [name for name in ("loss", "lr") if name in values]
    return " ".join(f"{name} {significant(values[name])}" for name in shown)


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
                self._bar = tqdm(total=total, initial=initial, unit="step", bar_format=BAR_FORMAT)

    def advance(self, step: int, values: dict[str, float] | None) -> None:
        """Move to ``step``; ``values`` (at log steps) are shown on the bar or logged.

        Per-group values are shown for the first group only; the metrics files have them all.
        """
        if values:
            values = _display(values)
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            if values:
                self._bar.set_postfix_str(_bar_values(values), refresh=False)
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
