"""The Trainer: the Model Zoo ``Trainer`` surface, running for real on the registered backends.

``Trainer(device=... | backend=..., model_dir, model, optimizer, schedulers, loop, checkpoint,
logging, precision, sparsity, callbacks, loggers, seed)``, then ``.fit(train_dataloader,
val_dataloader, ckpt_path)`` or ``.validate(val_dataloader, ckpt_path)``. ``model`` may be a
module or a callable building one; ``optimizer`` an optimizer or a callable taking the model;
each scheduler an instance or a callable taking the optimizer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from plugtrain._unset import UNSET
from plugtrain.config.precision import PrecisionSettings
from plugtrain.config.sections import (
    MUTUALLY_EXCLUSIVE,
    CheckpointSettings,
    LoggingSettings,
    LoopSettings,
)
from plugtrain.config.speed import ProfileSettings
from plugtrain.contract.strategy import strategy_of
from plugtrain.errors import ConfigError, ConfigIssue, TrainingError
from plugtrain.registry.components import Registry
from plugtrain.train.checkpointing import Checkpointer, TrainerState, checkpointer_for, run_locks
from plugtrain.train.components import (
    as_list,
    backend_from,
    evaluation_mode,
    optimizer_from,
    schedulers_from,
    settings_from,
    training_mode,
)
from plugtrain.train.data import DataStream, in_global_order, known_empty, seed_everything
from plugtrain.train.distributed import InterruptRequest, refuse_presharded_model
from plugtrain.train.loop import (
    Callbacks,
    Evaluation,
    NonFiniteGuard,
    OptimizerStep,
    Precision,
    Scored,
    Sparsity,
    TrainingLoop,
    Validation,
    default_loss,
    group_values,
    move_batch,
    prepare_model,
    score_batch,
    sparsity_groups,
    steps_per_epoch,
    target_step,
)
from plugtrain.train.observability import (
    DEFAULT_CALLBACKS,
    DEFAULT_LOGGERS,
    Loggers,
    allow_failures,
    assemble,
    console_logging,
    loss_tokens_in,
    profiler_callbacks,
    say_inert_off_csx,
    token_counter,
)

__all__ = ["Trainer", "default_loss"]

log = logging.getLogger("plugtrain")

DEFAULT_LOG_STEPS = 50


class Trainer:
    """Trains and evaluates one model on one backend (Model Zoo's ``Trainer``).

    :param device: ``"CPU"``, ``"GPU"`` or ``"CSX"``: that backend with default settings.
    :param backend: a backend object (``plugtrain.backend(...)``), its type name, or a mapping
        ``{backend_type: ..., ...}``. Exclusive with ``device``. Neither: ``CPU``.
    :param model_dir: where checkpoints and metrics go.
    :param model: an ``nn.Module`` or a callable returning one (called after seeding).
    :param optimizer: an optimizer, a callable taking the model and returning one, or the
        run file's mapping ``{Name: {arguments}}`` (built as ``plugtrain.build_optimization``
        builds it).
    :param schedulers: one or a list of schedulers, or callables taking the optimizer; with an
        optimizer mapping, the run file's ``[{Name: {arguments}}]``.
    :param loop: :class:`LoopSettings` or its mapping.
    :param checkpoint: :class:`CheckpointSettings` or its mapping.
    :param logging: :class:`LoggingSettings` or its mapping.
    :param precision: :class:`PrecisionSettings` or its mapping (Model Zoo's ``precision``:
        autocast, loss scaling, gradient clipping; see :mod:`plugtrain.train.loop.precision`).
    :param sparsity: weight sparsity (Model Zoo's ``sparsity``): a level (one ``static``
        group), a group mapping ``{algorithm: ..., sparsity: ..., ...}``, a list of them, or
        :class:`plugtrain.train.loop.sparsity.SparsityGroup` objects; see
        :mod:`plugtrain.train.loop.sparsity`.
    :param callbacks: objects with any of the methods of :class:`plugtrain.protocols.Callback`,
        or ``{Name: {arguments}}`` of registered callbacks; called in list order, then the
        default ``Throughput`` (``{Name: None}`` removes it).
    :param loggers: :class:`plugtrain.protocols.Logger` objects or ``{Name: {arguments}}``, in
        addition to the defaults ``ProgressLogger`` and ``MetricsFilesLogger``; ``{Name: None}``
        removes a default, and an object of a default's class replaces it.
    :param seed: seeds Python, numpy and torch before the model is built.
    :param loss_fn: ``loss_fn(outputs, targets)`` for models that return outputs rather than
        their loss (:mod:`plugtrain.train.loop.batches`); default cross-entropy for class labels.
    :param config: the resolved run configuration, stored in checkpoints' metadata.
    :param compile: ``off``, ``regional`` or ``full`` (:mod:`.model_preparation`).
    :param activation_checkpointing: ``off``, ``full`` or ``selective`` (the same module).
    :param profile: a profiler window (:mod:`plugtrain.train.observability.profiling`) or its
        mapping.
    :param registry: where a Hugging Face ``ckpt_path``'s converter is found (default: the
        process's registry).
    """

    data_description: dict[str, Any] | None = None
    """The training data loader's name and arguments as a run file gives them (set by
    ``plugtrain fit``); part of the data fingerprint a resume by position checks."""

    # Set by __init__'s helpers (_attach_callbacks, _attach_parts); the parts read them.
    callbacks: list[Any]
    """The callbacks, in call order: the given ones, then the defaults and the profiler."""
    loggers: list[Any]
    """The loggers, defaults first (called on the main process only)."""
    callbacks_dispatch: Callbacks
    loggers_dispatch: Loggers
    nan_guard: NonFiniteGuard
    evaluation: Evaluation
    validation: Validation
    state: TrainerState
    training_loop: TrainingLoop

    def __init__(
        self,
        *,
        device: str | None = None,
        backend: Any = None,
        model_dir: str | os.PathLike[str] = "./model_dir",
        model: nn.Module | Callable[[], nn.Module],
        optimizer: Any = None,
        schedulers: Any = None,
        loop: LoopSettings | Mapping[str, Any] | None = None,
        checkpoint: CheckpointSettings | Mapping[str, Any] | None = None,
        logging: LoggingSettings | Mapping[str, Any] | None = None,
        precision: PrecisionSettings | Mapping[str, Any] | None = None,
        sparsity: Any = None,
        callbacks: Sequence[Any] | None = None,
        loggers: Sequence[Any] | None = None,
        seed: int | None = None,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        config: Mapping[str, Any] | None = None,
        compile: str = "off",  # noqa: A002 - the run file's key
        activation_checkpointing: str = "off",
        profile: ProfileSettings | Mapping[str, Any] | None = None,
        registry: Registry | None = None,
    ) -> None:
        if device is not None and backend is not None:
            raise ValueError(MUTUALLY_EXCLUSIVE)
        self.backend = backend_from(device, backend)
        self.backend.check_runnable()
        self.strategy = strategy_of(self.backend)
        """The backend's parallel strategy (:mod:`plugtrain.strategy`)."""
        self.model_dir = Path(model_dir)
        self.loop: LoopSettings | None = settings_from(LoopSettings, loop, "loop")
        self.checkpoint: CheckpointSettings = (
            settings_from(CheckpointSettings, checkpoint, "checkpoint") or CheckpointSettings()
        )
        self.logging: LoggingSettings = settings_from(
            LoggingSettings, logging, "logging"
        ) or LoggingSettings(log_steps=DEFAULT_LOG_STEPS)
        say_inert_off_csx(self.backend, self.logging)
        self._attach_callbacks(callbacks, loggers, profile)
        self.global_step = 0
        self.target_step: int | None = None
        """The step the current (or last) ``fit`` ends at; ``None`` before any fit."""
        self.seed = seed
        self.loss_fn = loss_fn or default_loss
        self.config = config
        self.registry = registry
        if seed is not None:
            seed_everything(seed)
        self.device: torch.device = self.backend.device
        self.precision = self._make_precision(precision)
        self._move_batches = self.device.type != "cpu"
        groups = sparsity_groups(sparsity)
        if isinstance(model, nn.Module):
            built = self.callbacks_dispatch.on_model_built(self, model)
        else:  # sparsity reads the weights as they are built: whole, on this device
            build = self.callbacks_dispatch.building(self, model)
            built = build() if groups else self.strategy.build_model(build)
        self.sparsity: Sparsity | None = Sparsity(groups, built, seed=seed or 0) if groups else None
        """The model's weight sparsity (masks and algorithms); ``None`` without."""
        built = prepare_model(
            built, compile=compile, activation_checkpointing=activation_checkpointing
        )
        self.model: nn.Module = self._wrap_model(built)
        self.optimizer, self.schedulers = self._make_optimization(optimizer, schedulers)
        self.loaded_step: int | None = None
        """The global step stored in the checkpoint loaded last (``None``: none loaded)."""
        self.checkpointer: Checkpointer = checkpointer_for(self)
        """Writes, finds and reads this trainer's checkpoints."""
        self.stream_position: dict[str, Any] | None = None
        """Where the training data stands, as the last checkpoint saved or loaded it."""
        self.saved_step = -1
        """The step of the last checkpoint this trainer saved."""
        self.last_good_checkpoint: Path | None = None
        """The newest checkpoint known to be sound."""
        self.stream: DataStream | None = None
        self._attach_parts()

    def _attach_callbacks(self, callbacks: Any, loggers: Any, profile: Any) -> None:
        """The callbacks and loggers, and their dispatchers (loggers run on the main process)."""
        self.callbacks = assemble(
            "callback", callbacks, DEFAULT_CALLBACKS, defaults_last=True
        ) + profiler_callbacks(settings_from(ProfileSettings, profile, "profile"))
        self.loggers = assemble("logger", loggers, DEFAULT_LOGGERS, ("log_metrics", "close"))
        main = self.is_main_process
        self.callbacks_dispatch = Callbacks(self.callbacks + (self.loggers if main else []))
        self.loggers_dispatch = Loggers(
            self.loggers if main else [], self.callbacks_dispatch.failures
        )
        allow_failures(self.callbacks_dispatch.failures, self.loggers, self.logging.on_error)

    def _attach_parts(self) -> None:
        """The parts with one job each that the facade delegates to."""
        self.nan_guard = NonFiniteGuard(self)
        self.evaluation = Evaluation(self)
        self.validation = Validation(self, self.evaluation)
        self.state = TrainerState(self)
        step = OptimizerStep(self, self.nan_guard)
        self.training_loop = TrainingLoop(self, step, self.evaluation)

    # -- construction --------------------------------------------------------------------------

    def _make_precision(self, precision: Any) -> Precision:
        settings = settings_from(PrecisionSettings, precision, "precision")
        if settings is not None and hasattr(self.backend, "configure_precision"):
            self.backend.configure_precision(settings)
        compiled = bool(getattr(self.backend, "compiles_precision", False))
        return Precision(settings, self.device, on_csx=compiled)

    def _make_optimization(self, optimizer: Any, schedulers: Any) -> tuple[Any, list[Any]]:
        """The optimizer (sparsity's masks attached to it), then the schedulers of it."""
        given = as_list(schedulers)
        made, from_mappings = optimizer_from(
            optimizer, given, self.unwrapped_model, self.strategy, self.backend
        )
        if self.sparsity is not None and made is not None:
            self.sparsity.attach_optimizer(made)
        return made, schedulers_from(given, made, from_mappings)

    def _wrap_model(self, model: nn.Module) -> nn.Module:
        """The model as the strategy places it, once it is known the strategy can."""
        refuse_presharded_model(model, self.strategy)
        wrapped: nn.Module = self.strategy.wrap_model(model)
        return wrapped

    @property
    def unwrapped_model(self) -> nn.Module:
        """The module that holds the weights (the model without its DDP or other wrapper)."""
        return self.strategy.unwrap_model(self.model)  # type: ignore[no-any-return]

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints and metrics (rank 0)."""
        return bool(self.backend.is_main_process)

    @property
    def samples_seen(self) -> int:
        """Training examples this process drew in the current (or last) ``fit``.

        A batch counts the length of its first tensor's first dimension (the inputs of a pair,
        a mapping's first tensor value); a batch without a tensor counts 1.
        """
        return self.stream.samples if self.stream is not None else 0

    def forward(self, batch: Any, model: nn.Module | None = None) -> Scored:
        """Loss, count and metrics of one batch (the contract of :mod:`.loop.batches`)."""
        batch = move_batch(batch, self.device) if self._move_batches else batch
        keywords = bool(getattr(self.unwrapped_model, "batch_as_kwargs", False))
        model = model or self.model
        return score_batch(model, batch, self.loss_fn, self.precision.autocast, keywords)

    def group_values(self) -> dict[str, float]:
        """Learning rate and weight decay of every param group, for metrics."""
        return group_values(self.optimizer)

    # -- evaluation ----------------------------------------------------------------------------

    def evaluate(
        self, dataloader: Iterable[Any], max_batches: int | None = None
    ) -> dict[str, float]:
        """Mean loss over the examples of ``dataloader``, and its other metrics.

        Accuracy for class labels the Trainer scored, the model's own metrics (weighted by each
        batch's count), and ``perplexity`` for a model with ``report_perplexity``.
        """
        with evaluation_mode(self.optimizer):
            return self.evaluation.evaluate(dataloader, max_batches)

    def validate(
        self,
        val_dataloader: Iterable[Any],
        ckpt_path: str | os.PathLike[str] | None = UNSET,
    ) -> dict[str, float]:
        """Evaluate on ``val_dataloader`` (after loading a checkpoint) and return the metrics.

        :param ckpt_path: the checkpoint to evaluate; ``None``: the model as it is (untrained
            unless this trainer has fitted); unset: the newest sound checkpoint in
            ``model_dir``, and an error when there is none and this trainer has not fitted.
        """
        with console_logging(self.logging.log_level):
            return self.validation.validate(val_dataloader, ckpt_path)

    def validate_all(
        self,
        val_dataloaders: Iterable[Any] | Mapping[str, Iterable[Any]] | None = None,
        ckpt_paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = UNSET,
    ) -> list[dict[str, Any]]:
        """Evaluate every checkpoint on every data loader (Model Zoo's ``validate_all``).

        :param val_dataloaders: one data loader, a list of them, or ``{name: loader}``; none:
            the callbacks alone evaluate each checkpoint (a downstream harness), one record
            each with ``"dataloader": None``.
        :param ckpt_paths: a path, a glob (``model_dir/checkpoint_*.mdl``) or a list of them;
            unset: every checkpoint in the checkpoint folder, in step order; ``None``: the model
            as it is.
        :returns: one record per checkpoint and data loader, in that order:
            ``{"checkpoint": path or None, "step": ..., "dataloader": name, **metrics}``.
        :raises CheckpointError: a checkpoint that cannot be loaded (naming it), or none found.
        """
        with console_logging(self.logging.log_level):
            return self.validation.validate_all(val_dataloaders, ckpt_paths)

    # -- checkpoints ---------------------------------------------------------------------------

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints are written and found: ``checkpoint_root``, else ``model_dir``."""
        root = self.checkpoint.checkpoint_root
        return Path(root) if root is not None else self.model_dir

    def checkpoint_path(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is written."""
        return self.checkpointer.path(step)

    def state_dict(self) -> dict[str, Any]:
        """All it takes to continue exactly: weights, optimizer, schedulers, scaler, RNG, data."""
        return self.state.state_dict()

    def save_checkpoint(self, stream: DataStream | None = None) -> Path | None:
        """Write the checkpoint of the current step (on the main process only)."""
        return self.state.save(stream)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore a checkpoint: weights, optimizer, schedulers, grad scaler, step, RNG, data.

        Callback state too. Callbacks' ``on_before_load_checkpoint`` may delete parts (see
        :mod:`plugtrain.train.checkpointing.state.parts`) to keep them as they are; the RNG is
        restored with ``global_step``.

        :raises CorruptCheckpointError: the file is damaged or holds non-finite weights.
        :raises CheckpointMismatchError: it does not fit this trainer (nothing was changed).
        """
        self.state.load(path)

    # -- fit -----------------------------------------------------------------------------------

    def fit(
        self,
        train_dataloader: Iterable[Any],
        val_dataloader: Iterable[Any] | None = None,
        ckpt_path: str | os.PathLike[str] | None = UNSET,
    ) -> dict[str, float]:
        """Train until the loop's limit; returns the last validation metrics (or ``{}``).

        The main process holds ``model_dir``'s lock throughout (one fit per directory).

        :param ckpt_path: a checkpoint to start from; ``None``: none; unset: the newest sound
            checkpoint in ``model_dir`` when ``autoload_last_checkpoint`` (a damaged newer one
            is skipped with a warning). A starting point (a Hugging Face folder, a checkpoint
            outside the checkpoint folder) begins the run; once the folder holds this run's
            checkpoints, the run resumes from the newest of them. A run starting at step 0
            never writes over checkpoints of later steps: it is refused
            (:mod:`plugtrain.train.checkpointing.state.fit_start`).
        """
        if self.optimizer is None:
            message = "fit needs an optimizer"
            raise ConfigError([ConfigIssue("optimizer", message)])
        self.state.check_room()
        if known_empty(val_dataloader):
            message = "the evaluation data (val_dataloader) is empty: it yields no example"
            raise TrainingError(message)
        lock = run_locks(self.model_dir, self.checkpoint_dir, self.is_main_process)
        with lock, console_logging(self.logging.log_level):
            return self._fit(train_dataloader, val_dataloader, ckpt_path)

    def _fit(
        self, train_dataloader: Iterable[Any], val_dataloader: Iterable[Any] | None, ckpt_path: Any
    ) -> dict[str, float]:
        if self.is_main_process:
            self.checkpointer.claim()
            for stale in self.checkpointer.clean_up():
                log.info("removed %s, left by an interrupted save", stale)
        self.state.restore_for_fit(ckpt_path)
        self.training_loop.started_anew = ckpt_path is None
        training_mode(self.optimizer)  # a checkpoint holds the optimizer in its eval() mode
        if self.sparsity is not None:
            self.sparsity.initialize()
        ordered = in_global_order(
            train_dataloader,
            self.loop,
            self.strategy,
            backend_type=self.backend.backend_type,
            seed=self.seed,
            description=self.data_description,
        )
        train_dataloader = self.backend.prepare_dataloader(ordered)
        target = target_step(self.loop, self.global_step, train_dataloader)
        assert self.loop is not None
        self.target_step = target
        epoch_steps = self.loop.steps_per_epoch and steps_per_epoch(self.loop, train_dataloader)
        batches = epoch_steps * self.loop.grad_accum_steps if epoch_steps else None
        stream = self.stream = DataStream(
            train_dataloader,
            self.stream_position,
            batches_per_epoch=batches,
            count_tokens=token_counter(self.unwrapped_model),
            count_loss_tokens=loss_tokens_in,
        )
        last_val: dict[str, float] = {}
        try:
            self.callbacks_dispatch.on_fit_start(self)
            if self.checkpoint.save_initial_checkpoint and self.global_step == 0:
                self.save_checkpoint(stream)
            with InterruptRequest() as interrupt:
                last_val = self.training_loop.run(stream, val_dataloader, target, interrupt)
            self.callbacks_dispatch.on_fit_end(self)
        finally:
            self.loggers_dispatch.close()
        return last_val
