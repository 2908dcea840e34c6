"""The Trainer's loggers: the two default ones, and how a trainer's list is assembled.

A logger meets :class:`plugtrain.protocols.Logger`; it may also define any
:class:`plugtrain.protocols.Callback` method, which the Trainer calls on the main process only
(after the callbacks'), so a logger can open its files when a fit starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plugtrain.contract.protocols import TrainerView
from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.kinds import KINDS
from plugtrain.train.observability.failures import Failures
from plugtrain.train.observability.fit_summary import SummarizedTrainer, describe_fit
from plugtrain.train.observability.metrics import MetricsLog, Progress, set_aside_metrics
from plugtrain.train.observability.throughput import Throughput

__all__ = [
    "DEFAULT_CALLBACKS",
    "DEFAULT_LOGGERS",
    "Loggers",
    "MetricsFilesLogger",
    "ProgressLogger",
    "assemble",
]

log = logging.getLogger("plugtrain")


class ProgressLogger:
    """The progress display (on by default): a tqdm bar on a terminal, log lines otherwise.

    Whether the bar is shown follows ``logging.progress`` (``None``: when stderr is a terminal);
    without the bar, each logged training record is a log line.
    """

    def __init__(self) -> None:
        self._progress: Progress | None = None

    def on_fit_start(self, trainer: SummarizedTrainer) -> None:
        """Say what the fit does, then start the bar at its step, ending at its last step."""
        self.close()
        stream = getattr(trainer, "stream", None)
        log.info("%s", describe_fit(trainer, getattr(stream, "loader", None)))
        show = trainer.logging.progress
        assert trainer.target_step is not None  # fit sets it before on_fit_start
        self._progress = Progress(trainer.target_step, trainer.global_step, show)

    def on_train_step_start(self, trainer: TrainerView, step: int) -> None:
        """Move the bar to the step just finished."""
        if self._progress is not None:
            self._progress.advance(step - 1, None)

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Show training records on the bar (or log them) and print each evaluation's line."""
        if self._progress is None:
            return
        if split == "train":
            self._progress.advance(step, dict(metrics))
        else:
            described = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
            self._progress.message(f"step {step}: validation {described}")

    def close(self) -> None:
        """Close the bar."""
        if self._progress is not None:
            self._progress.close()
            self._progress = None


class MetricsFilesLogger:
    """``metrics.jsonl`` and ``metrics.csv`` in ``model_dir`` (on by default).

    A fit that resumes from the checkpoint of step N first drops the rows of later steps (they
    are about to be replayed) and any partial last line.
    """

    def __init__(self) -> None:
        self._log: MetricsLog | None = None
        self._directory: Path | None = None

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Open the files, dropping rows after the step the fit resumes from.

        A fit that does not resume from a checkpoint of its own folder (from scratch, or
        fine-tuning from another folder's) sets the earlier files aside instead
        (:func:`.metrics.set_aside_metrics`), as does one that loads its own folder's checkpoint
        without its step (``LoadCheckpointStates`` of the model only: fine-tuning that counts
        from step 0 again, whose rows would otherwise read as replayed).
        """
        self.close()
        directory = self._directory = Path(trainer.model_dir)
        loaded = trainer.last_good_checkpoint if trainer.loaded_step is not None else None
        own = Path(trainer.checkpoint_dir).resolve()
        continues = trainer.global_step == trainer.loaded_step
        if loaded is not None and continues and Path(loaded).resolve().parent == own:
            self._log = MetricsLog(directory, resume_step=trainer.global_step)
            return
        for moved in set_aside_metrics(directory):
            log.info("metrics: the earlier run's rows are kept in %s", moved)
        self._log = MetricsLog(directory)

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Open the files for a ``validate`` (no rows dropped).

        A ``model_dir`` that cannot be written (a published, read-only results folder) does not
        stop the evaluation: a warning says where the metrics could not go and how to send them
        elsewhere, and the results are only printed.
        """
        if self._log is not None:
            return
        directory = self._directory = Path(trainer.model_dir)
        try:
            self._log = MetricsLog(directory)
        except OSError as exc:
            log.warning("%s", _unwritable_metrics(directory, exc))

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Append one record to both files."""
        if self._log is not None:
            self._log.write(step, split, dict(metrics))

    def close(self) -> None:
        """Close both files."""
        if self._log is not None:
            self._log.close()
            self._log = None


def _unwritable_metrics(directory: Path, exc: OSError) -> str:
    """What a ``validate`` whose ``model_dir`` cannot be written does about its metrics."""
    return (
        f"metrics: {directory} cannot be written ({exc.strerror or exc}); evaluating anyway, "
        "the results are only printed. To keep them in files, run with "
        "--set trainer.init.model_dir=A_WRITABLE_FOLDER "
        f"--set trainer.init.checkpoint.checkpoint_root={directory}"
    )


DEFAULT_LOGGERS: dict[str, Callable[[], Any]] = {
    "ProgressLogger": ProgressLogger,
    "MetricsFilesLogger": MetricsFilesLogger,
}
"""The loggers every trainer has unless removed, by registered name (``registry.kinds``)."""

DEFAULT_CALLBACKS: dict[str, Callable[[], Any]] = {
    "Throughput": lambda: Throughput(only_with_tokens=True),
}
"""The callbacks every trainer has unless removed (after the given ones): ``Throughput``, which
reports only for models whose batches hold tokens."""


class Loggers:
    """Every logger of a trainer: each record goes to each, in order (main process only)."""

    def __init__(self, loggers: Sequence[Any], failures: Failures | None = None) -> None:
        self.loggers = list(loggers)
        self.failures = failures or Failures()
        """Which loggers may fail without stopping the fit (shared with the callbacks)."""

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Hand ``metrics`` to every logger.

        :raises ComponentFailedError: naming the logger that raised.
        """
        failures = self.failures
        for logger in self.loggers:
            if failures.active(logger):
                with failures.blamed(logger, "log_metrics"):
                    logger.log_metrics(step, split, metrics)

    def close(self) -> None:
        """Close every logger; the first failure is raised after all were closed."""
        failure: BaseException | None = None
        for logger in self.loggers:
            try:
                with self.failures.blamed(logger, "close"):
                    logger.close()
            except Exception as exc:  # noqa: BLE001 - the others must still close
                failure = failure or exc
        if failure is not None:
            raise failure


def _build_mapping(kind: str, entry: Mapping[str, Any]) -> Any:
    from plugtrain.discovery.loading import get_registry
    from plugtrain.train.components import build_component

    return build_component(get_registry(), kind, entry)


def _default_named(kind: str, name: Any, where: str) -> str:
    defaults = KINDS[kind].defaults
    for default in defaults:
        if isinstance(name, str) and default.lower() == name.lower():
            return default
    listed = ", ".join(defaults) or "none"
    message = f"{name}: null removes a default {kind}, and {name!r} is none (defaults: {listed})"
    raise ConfigError([ConfigIssue(where, message)])


def assemble(
    kind: str,
    entries: Sequence[Any] | None,
    defaults: Mapping[str, Callable[[], Any]],
    required: Sequence[str] = (),
    *,
    defaults_last: bool = False,
) -> list[Any]:
    """The objects of a trainer's ``callbacks`` or ``loggers`` list, defaults first.

    :param entries: objects, ``{Name: {arguments}}`` mappings (built through the registry) and
        ``{Name: None}`` (the default called ``Name`` is dropped). An object whose class is named
        like a default replaces that default.
    :param defaults: factories of the defaults, by registered name.
    :param required: methods each object must have (a logger's ``log_metrics`` and ``close``).
    :param defaults_last: put the defaults after the given objects (the default callbacks, so
        that the given callbacks keep their positions in checkpoints' callback states).
    :raises ConfigError: for a removal naming no default, or an object lacking a method.
    """
    plural = KINDS[kind].plural
    removed: set[str] = set()
    given: list[Any] = []
    for index, entry in enumerate(entries or ()):
        where = f"{plural}[{index}]"
        item = entry
        if isinstance(entry, Mapping) and len(entry) == 1:
            ((name, arguments),) = entry.items()
            if arguments is None:
                removed.add(_default_named(kind, name, where))
                continue
            item = _build_mapping(kind, entry)
        missing = [m for m in required if not callable(getattr(item, m, None))]
        if missing:
            message = (
                f"a {kind} needs the methods {', '.join(required)}; "
                f"{type(item).__name__} lacks {', '.join(missing)}"
            )
            raise ConfigError([ConfigIssue(where, message)])
        given.append(item)
    replaced = {type(entry).__name__ for entry in given}
    built = [factory() for name, factory in defaults.items() if name not in removed | replaced]
    return given + built if defaults_last else built + given
