"""``validate`` and ``validate_all``: checkpoints loaded, then evaluated on every data loader."""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from plugtrain._unset import UNSET
from plugtrain.config.sections import LoopSettings
from plugtrain.contract.protocols import CheckpointFolder, TrainerView
from plugtrain.errors import CheckpointError
from plugtrain.train.loop.evaluation import Evaluation, describe_metrics
from plugtrain.train.loop.sparsity import Sparsity
from plugtrain.train.observability import Loggers

__all__ = ["Restoring", "ValidatedTrainer", "Validation"]

log = logging.getLogger("plugtrain")


class Restoring(Protocol):
    """How :class:`Evaluation` loads checkpoints (the trainer's checkpointing state)."""

    def restore(self, ckpt_path: Any) -> Path | None:
        """Load ``ckpt_path`` (unset: the newest sound one, if autoloading); the path loaded."""

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load the checkpoint at ``path``."""


class CheckpointList(CheckpointFolder, Protocol):
    """Where :class:`Evaluation` finds the checkpoints ``validate_all`` evaluates."""

    directory: Path
    name: str

    def step_of(self, path: str | Path) -> int | None:
        """The step in a checkpoint's file name (``None``: not one of this run's names)."""


class ValidatedTrainer(TrainerView, Protocol):
    """What :class:`Validation` reads of the trainer whose checkpoints it evaluates."""

    global_step: int

    @property
    def loop(self) -> LoopSettings | None:
        """``eval_steps``: batches per evaluation."""

    @property
    def sparsity(self) -> Sparsity | None:
        """Initialized after a checkpoint was loaded."""

    @property
    def checkpointer(self) -> CheckpointList:
        """The checkpoints ``validate_all`` finds."""

    @property
    def state(self) -> Restoring:
        """Loads the checkpoints to evaluate."""

    @property
    def loggers_dispatch(self) -> Loggers:
        """Its loggers, closed when the evaluations are done."""


def _named_loaders(value: Any) -> list[tuple[str, Any]]:
    """``(name, loader)`` pairs: a mapping's names, else each loader's position (none: none)."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(str(name), loader) for name, loader in value.items()]
    if isinstance(value, list | tuple):
        return [(str(index), loader) for index, loader in enumerate(value)]
    return [("0", value)]


class Validation:
    """Evaluates a trainer's checkpoints (``validate``, ``validate_all``).

    :param trainer: the trainer whose checkpoints are loaded.
    :param evaluation: scores the loaded model on each data loader.
    """

    def __init__(self, trainer: ValidatedTrainer, evaluation: Evaluation) -> None:
        self.trainer = trainer
        self.evaluation = evaluation

    def validate(self, val_dataloader: Iterable[Any], ckpt_path: Any = UNSET) -> dict[str, float]:
        """See :meth:`plugtrain.train.trainer.Trainer.validate`."""
        trainer = self.trainer
        loaded = trainer.state.restore(ckpt_path)
        if ckpt_path is UNSET and loaded is None and trainer.last_good_checkpoint is None:
            name = trainer.checkpointer.name
            directory = trainer.checkpointer.directory
            where = "" if directory.is_dir() else "; the folder does not exist"
            message = (
                f"{directory}: no checkpoint to validate (no sound file named {name}"
                f"{where}); give ckpt_path a checkpoint, or ckpt_path: null to evaluate the "
                "untrained model"
            )
            raise CheckpointError(message)
        if trainer.sparsity is not None:
            trainer.sparsity.initialize()
        try:
            metrics = self.evaluation.run(val_dataloader, self._eval_steps())
        finally:
            trainer.loggers_dispatch.close()
        log.info("validation at step %d: %s", trainer.global_step, describe_metrics(metrics))
        return metrics

    def _eval_steps(self) -> int | None:
        loop = self.trainer.loop
        return loop.eval_steps if loop else None

    def validate_all(self, val_dataloaders: Any, ckpt_paths: Any = UNSET) -> list[dict[str, Any]]:
        """See :meth:`plugtrain.train.trainer.Trainer.validate_all`."""
        trainer = self.trainer
        loaders = _named_loaders(val_dataloaders)
        paths = self._paths(ckpt_paths)
        records: list[dict[str, Any]] = []
        try:
            for path in paths:
                if path is not None:
                    self._load(path)
                if trainer.sparsity is not None:
                    trainer.sparsity.initialize()
                if not loaders:
                    records.append(self._callbacks_only(path))
                for name, loader in loaders:
                    # the metrics files tell checkpoints apart by step, loaders by split
                    metrics = self.evaluation.run(
                        loader, self._eval_steps(), f"validate_all/{name}"
                    )
                    where = path if path is not None else "the model as it is"
                    log.info(
                        "validation of %s on %s at step %d: %s",
                        where,
                        name,
                        trainer.global_step,
                        describe_metrics(metrics),
                    )
                    record: dict[str, Any] = {
                        "checkpoint": None if path is None else str(path),
                        "step": trainer.global_step,
                        "dataloader": name,
                    }
                    records.append({**record, **metrics})
        finally:
            trainer.loggers_dispatch.close()
        return records

    def _callbacks_only(self, path: Path | None) -> dict[str, Any]:
        """Evaluate with the callbacks alone (no data loader): their metrics, logged."""
        trainer = self.trainer
        metrics = self.evaluation.run_callbacks("validate_all")
        where = path if path is not None else "the model as it is"
        log.info("callbacks' evaluation of %s: %s", where, describe_metrics(metrics))
        record = {"checkpoint": None if path is None else str(path), "step": trainer.global_step}
        return {**record, "dataloader": None, **metrics}

    def _paths(self, ckpt_paths: Any) -> list[Path | None]:
        """The checkpoints ``validate_all`` evaluates, in order; globs expanded."""
        if ckpt_paths is None:
            return [None]
        checkpointer = self.trainer.checkpointer
        if ckpt_paths is UNSET:
            found = checkpointer.list_checkpoints()
            if not found:
                message = (
                    f"{checkpointer.directory}: no checkpoint to validate (no file named "
                    f"{checkpointer.name}); give validate_all ckpt_paths"
                )
                raise CheckpointError(message)
            return [path for _, path in reversed(found)]
        written = [ckpt_paths] if isinstance(ckpt_paths, str | os.PathLike) else list(ckpt_paths)
        paths: list[Path | None] = []
        for item in written:
            text = os.fspath(item)
            if glob.has_magic(text):
                matches = sorted(glob.glob(text), key=self._step_order)
                if not matches:
                    raise CheckpointError(f"ckpt_paths: {text!r} matches no file")
                paths.extend(Path(m) for m in matches)
            elif not Path(text).exists():  # a file, or a DCP checkpoint's folder
                raise CheckpointError(f"{text}: no such checkpoint file (ckpt_paths)")
            else:
                paths.append(Path(text))
        return paths

    def _step_order(self, path: str) -> tuple[int, str]:
        """Checkpoints of this run's file name by step, other files after them by name."""
        step = self.trainer.checkpointer.step_of(path)
        return (2**63 if step is None else step, path)

    def _load(self, path: Path) -> None:
        """Load one checkpoint of ``validate_all``; any failure names the file."""
        trainer = self.trainer
        try:
            trainer.state.load(path)
            # Records and metrics carry the checkpoint's step even when a callback
            # (LoadCheckpointStates) kept the global step from being restored.
            trainer.global_step = trainer.loaded_step or 0
        except CheckpointError:
            raise
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as exc:
            message = f"{path}: cannot be loaded for validate_all: {type(exc).__name__}: {exc}"
            raise CheckpointError(message) from exc
