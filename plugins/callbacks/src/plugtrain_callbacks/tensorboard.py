"""TensorBoardLogger: every metric as TensorBoard scalars (the ``tensorboard`` extra)."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plugtrain.protocols import TrainerView
from plugtrain.schema import validated_arguments
from plugtrain_callbacks._extras import require_extra
from plugtrain_callbacks.schemas import TensorBoardLoggerArgs

__all__ = ["TensorBoardLogger"]

LEGACY_DIRS = {"train": "train", "val": "eval"}
"""With ``legacy_event_dirs``: the event directory of each split, under ``model_dir``."""


_QUIET = threading.Lock()
_quieted: list[bool] = []


def _quiet_writer_threads() -> None:
    """Keep the event writer's background thread from printing its error as a raw traceback.

    ``SummaryWriter`` writes on a thread; when a write fails (a full disk) the thread stores
    the error, which the next ``add_scalar``/``flush`` raises here, in the fit, where it is
    reported naming this logger. The thread's own print of it is dropped; others are not.
    """
    with _QUIET:
        if _quieted:
            return
        previous = threading.excepthook

        def hook(args: Any) -> None:
            thread = args.thread
            stored = getattr(thread, "exception", None)
            if type(thread).__name__ == "_AsyncWriterThread" and stored is args.exc_value:
                return
            previous(args)

        threading.excepthook = hook
        _quieted.append(True)


class TensorBoardLogger:
    """Writes each metric as a scalar ``<split>/<name>`` into TensorBoard event files.

    A fit that resumes from step N purges the events after N (they are replayed). Uses
    ``torch.utils.tensorboard.SummaryWriter``, which needs the ``tensorboard`` package.

    :param summary_dir: where the event files go; ``None``: ``model_dir/events``.
    :param legacy_event_dirs: one directory per split instead, ``model_dir/train`` and
        ``model_dir/eval``, with the metric names as tags (Model Zoo's old layout).
    """

    def __init__(self, summary_dir: str | None = None, legacy_event_dirs: bool = False) -> None:
        checked = validated_arguments(
            TensorBoardLoggerArgs,
            {"summary_dir": summary_dir, "legacy_event_dirs": legacy_event_dirs},
            owner="TensorBoardLogger",
        )
        require_extra("TensorBoardLogger")
        self.summary_dir = checked["summary_dir"]
        self.legacy_event_dirs: bool = checked["legacy_event_dirs"]
        self._writers: dict[str, Any] = {}
        self._model_dir: Path | None = None
        self._purge_step: int | None = None

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Open for a fit; events after the step it starts from are purged."""
        self.close()
        self._model_dir = Path(trainer.model_dir)
        self._purge_step = trainer.global_step + 1 if trainer.global_step else None

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Open for a ``validate`` (unless a fit already did)."""
        if self._model_dir is None:
            self._model_dir = Path(trainer.model_dir)

    def directory(self, split: str) -> Path:
        """The event directory of ``split``."""
        assert self._model_dir is not None
        if self.legacy_event_dirs:
            return self._model_dir / LEGACY_DIRS.get(split, split)
        if self.summary_dir is not None:
            return Path(self.summary_dir)
        return self._model_dir / "events"

    def _writer(self, split: str) -> Any:
        key = split if self.legacy_event_dirs else ""
        if key not in self._writers:
            from torch.utils.tensorboard import SummaryWriter

            _quiet_writer_threads()
            directory = self.directory(split)
            directory.mkdir(parents=True, exist_ok=True)
            self._writers[key] = SummaryWriter(str(directory), purge_step=self._purge_step)
        return self._writers[key]

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Add each numeric metric as a scalar at ``step``."""
        if self._model_dir is None:
            return
        writer = self._writer(split)
        for name, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                tag = name if self.legacy_event_dirs else f"{split}/{name}"
                writer.add_scalar(tag, value if math.isfinite(value) else float(value), step)
        writer.flush()

    def close(self) -> None:
        """Flush and close the event files."""
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
        self._model_dir = None
