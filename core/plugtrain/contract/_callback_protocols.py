"""What plugtrain requires of callbacks and loggers, and what they may read of the trainer.

Part of the public :mod:`plugtrain.protocols` (import them from there): :class:`Callback`,
:class:`Logger`, :data:`CALLBACK_HOOKS` and :data:`REVERSED_HOOKS` are written here, apart from
the protocols of the components a run is built of, with :class:`TrainerView`, the type of the
``trainer`` argument of every callback method (the Trainer is one; a test may hand a callback
any object with these attributes). Settings, the backend and the sparsity are described by the
few members a callback reads of them (the objects themselves have more). This module does not
import torch; tensor types appear in annotations only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from plugtrain.contract.strategy import ParallelStrategy

__all__ = [
    "CALLBACK_HOOKS",
    "REVERSED_HOOKS",
    "BackendView",
    "Callback",
    "CheckpointFolder",
    "CheckpointSettingsView",
    "Logger",
    "LoggingSettingsView",
    "LoopSettingsView",
    "PrecisionView",
    "SparseParameterView",
    "SparsityGroupView",
    "SparsityView",
    "TrainerView",
]


CALLBACK_HOOKS = (
    "on_model_built",
    "on_fit_start",
    "on_train_step_start",
    "on_before_optimizer_step",
    "on_after_optimizer_step",
    "on_train_step_end",
    "on_validate_start",
    "on_validate_end",
    "on_before_save_checkpoint",
    "on_save_checkpoint",
    "on_after_save_checkpoint",
    "on_before_load_checkpoint",
    "on_load_checkpoint",
    "on_fit_end",
)
"""The methods of :class:`Callback` the Trainer calls, in the order a ``fit`` calls them first."""

REVERSED_HOOKS = frozenset(
    {
        "on_after_optimizer_step",
        "on_train_step_end",
        "on_validate_end",
        "on_after_save_checkpoint",
        "on_fit_end",
    }
)
"""The hooks called in reverse list order (the closing half of a pair: ``*_end``, ``on_after_*``).

A callback listed before another opens first and closes last, so callbacks that swap weights in
and out (EMA, Schedule-Free, save/restore) nest like context managers.
"""


class BackendView(Protocol):
    """What a callback reads of the trainer's backend (a :class:`plugtrain.protocols.Backend`).

    Its optional members (``apply_flags``, ``peak_flops`` ...) are looked up with ``getattr``.
    """

    @property
    def backend_type(self) -> str:
        """The registered name: ``"CPU"``, ``"GPU"``, ``"CSX"`` ..."""

    @property
    def device(self) -> torch.device:
        """The device that models and batches are moved to."""

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints, metrics and logs (rank 0)."""


class LoopSettingsView(Protocol):
    """What a callback reads of ``trainer.loop`` (the run file's ``loop:`` settings)."""

    @property
    def max_steps(self) -> int | None:
        """The global step a fit stops at."""

    @property
    def num_steps(self) -> int | None:
        """Optimizer steps one fit takes."""

    @property
    def num_epochs(self) -> int | None:
        """Passes over the training data one fit takes."""

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches accumulated into one optimizer step."""

    @property
    def eval_frequency(self) -> int | float | None:
        """Steps between evaluations (a float: that fraction of the fit)."""

    @property
    def eval_steps(self) -> int | None:
        """Batches per evaluation (``None``: the whole set)."""


class CheckpointSettingsView(Protocol):
    """What a callback reads of ``trainer.checkpoint`` (the ``checkpoint:`` settings)."""

    @property
    def steps(self) -> int | None:
        """A checkpoint is saved every this many steps, and at the end."""

    @property
    def checkpoint_name(self) -> str:
        """The file (or folder) name pattern, with ``{step}``."""

    @property
    def checkpoint_root(self) -> str | None:
        """Where checkpoints go instead of ``model_dir`` (``None``: ``model_dir``)."""


class LoggingSettingsView(Protocol):
    """What a callback reads of ``trainer.logging`` (the ``logging:`` settings)."""

    @property
    def log_steps(self) -> int:
        """Training metrics are logged every this many steps."""

    @property
    def log_level(self) -> str:
        """``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR``."""

    @property
    def progress(self) -> bool | None:
        """Whether the progress bar is shown (``None``: when stderr is a terminal)."""


class PrecisionView(Protocol):
    """What a callback reads of ``trainer.precision`` (autocast, loss scaling, clipping)."""

    @property
    def settings(self) -> object:
        """The ``precision:`` settings in effect (``max_gradient_norm`` ...)."""

    @property
    def last_grad_norm(self) -> float | None:
        """The total gradient norm of the last step, before clipping (``None``: not measured)."""


class SparseParameterView(Protocol):
    """One sparsified parameter of a :class:`SparsityGroupView`."""

    @property
    def name(self) -> str:
        """Its full name in the model (``fc1.weight``)."""

    @property
    def mask(self) -> torch.Tensor:
        """Its mask: true where the weight is kept."""


class SparsityGroupView(Protocol):
    """One group of :class:`SparsityView`: an algorithm and the parameters it sparsifies."""

    @property
    def algorithm(self) -> object:
        """The group's :class:`plugtrain.protocols.SparsityAlgorithm`."""

    @property
    def params(self) -> Sequence[SparseParameterView]:
        """Its parameters, in model order."""


class SparsityView(Protocol):
    """What a callback reads of ``trainer.sparsity`` (the model's weight sparsity)."""

    @property
    def groups(self) -> Sequence[SparsityGroupView]:
        """The groups, in the order the run file gives them."""


class CheckpointFolder(Protocol):
    """What a callback may do with ``trainer.checkpointer`` (where the checkpoints live)."""

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """``(step, path)`` of every checkpoint found, newest first."""

    def prune(self, keep: int, spare: Path | None = None) -> list[Path]:
        """Delete this run's checkpoints but the newest ``keep`` (and ``spare``); the removed."""


class TrainerView(Protocol):
    """What a callback may read of the trainer that calls it (the ``trainer`` argument).

    Read-only: a callback changes the run through the objects it is given (the model, the
    optimizer, the metrics record), never by setting these attributes. Only ``backend``,
    ``strategy``, ``seed``, ``global_step`` (0), ``model_dir``, ``config`` and the settings
    exist yet in ``on_model_built``.
    """

    @property
    def model(self) -> torch.nn.Module:
        """The model as the strategy placed it (wrapped in DDP or sharded, on the device)."""

    @property
    def unwrapped_model(self) -> torch.nn.Module:
        """The module that holds the weights (the model without its DDP or other wrapper)."""

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer (``None``: a trainer built to evaluate only)."""

    @property
    def schedulers(self) -> Sequence[object]:
        """The schedulers (:class:`plugtrain.protocols.Scheduler`), stepped after each step."""

    @property
    def backend(self) -> BackendView:
        """Where the run executes."""

    @property
    def strategy(self) -> ParallelStrategy:
        """The backend's parallel strategy (:mod:`plugtrain.strategy`)."""

    @property
    def device(self) -> torch.device:
        """The device of the model and of the batches."""

    @property
    def model_dir(self) -> Path:
        """Where metrics go (and checkpoints, without ``checkpoint.checkpoint_root``)."""

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints are written and found."""

    @property
    def checkpointer(self) -> CheckpointFolder:
        """Lists and prunes the checkpoints of ``checkpoint_dir``."""

    @property
    def loop(self) -> LoopSettingsView | None:
        """The loop settings (``None``: a trainer built to evaluate only)."""

    @property
    def checkpoint(self) -> CheckpointSettingsView:
        """The checkpoint settings."""

    @property
    def logging(self) -> LoggingSettingsView:
        """The logging settings."""

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (restored with a checkpoint)."""

    @property
    def target_step(self) -> int | None:
        """The step the running (or last) ``fit`` ends at; ``None`` before any fit."""

    @property
    def samples_seen(self) -> int:
        """Training examples this process drew in the current (or last) ``fit``."""

    @property
    def loaded_step(self) -> int | None:
        """The global step stored in the checkpoint loaded last (``None``: none loaded)."""

    @property
    def last_good_checkpoint(self) -> Path | None:
        """The newest checkpoint known to be sound (saved or loaded by this trainer)."""

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes checkpoints and metrics (rank 0)."""

    @property
    def seed(self) -> int | None:
        """The seed the trainer was built with."""

    @property
    def config(self) -> Mapping[str, Any] | None:
        """The resolved run configuration (stored in checkpoints' metadata)."""

    @property
    def callbacks(self) -> Sequence[object]:
        """The callbacks, in call order: the given ones, then the defaults."""

    @property
    def loggers(self) -> Sequence[Logger]:
        """The loggers, defaults first (called on the main process only)."""

    @property
    def precision(self) -> PrecisionView:
        """Autocast, loss scaling and gradient clipping."""

    @property
    def sparsity(self) -> SparsityView | None:
        """The model's weight sparsity (``None``: none)."""


@runtime_checkable
class Callback(Protocol):
    """Code that runs at points of ``fit`` and ``validate``.

    Listed in a run file as ``callbacks: [{Name: {arguments}}]`` (registered through
    :func:`plugtrain.hookspecs.plugtrain_register_callbacks`) or given as objects:
    ``Trainer(callbacks=[...])``. Every method is optional: the Trainer reads which of these a
    callback defines once, when it is created, and calls only those: the opening hooks in list
    order, the closing ones (``*_end`` and ``on_after_*``, :data:`REVERSED_HOOKS`) in reverse
    list order, so that callbacks nest like context managers (deriving from this class gives
    no-op defaults for the rest). A method named ``on_...`` that is none of these is reported as
    a likely typo. Callbacks run on every process; ``trainer.is_main_process`` tells the one
    that writes files. ``docs/plugin-hooks.md`` has the full order table.

    A callback with state defines ``state_dict()`` and ``load_state_dict(state)``: the state is
    saved in every checkpoint (under ``callbacks``) and given back when one is loaded, matched
    by class name and occurrence (the second ``EMA`` gets the second saved ``EMA``'s state), by
    position only for entries saved without a name; a callback with no saved state starts
    fresh, with a warning. It must load with ``torch.load(..., weights_only=True)``.

    What a callback may read of the trainer is :class:`TrainerView` (annotate ``trainer`` with
    it): the model, optimizer and schedulers, the backend, the folders and checkpoints, the
    settings, ``global_step``, ``target_step`` (the step the running fit ends at),
    ``samples_seen`` (training examples this process drew in the fit), ``is_main_process``, the
    callbacks and loggers, the precision (its ``settings`` and ``last_grad_norm``), and the
    sparsity (``None``, or groups each with ``algorithm`` and ``params``, each parameter with
    ``name`` and ``mask``).
    """

    def on_model_built(self, trainer: TrainerView, model: Any) -> Any:
        """Once, when the Trainer has built ``model`` (since plugin API 1.1).

        Called while the Trainer is created: before sparsity, activation checkpointing,
        compilation, the strategy's wrapping (DDP, FSDP2) and any checkpoint load, so a callback
        may change the module in place here (replace layers, add parameters, freeze others:
        LoRA) or return another module to use instead (``None``: keep ``model``). Only
        ``backend``, ``strategy``, ``seed``, ``global_step`` (0), ``model_dir``, ``config`` and
        the settings of the trainer exist yet. Under FSDP2 the model may be on the ``meta``
        device: parameters added then are filled by the model's ``init_weights()``, which runs
        every module's ``reset_parameters``.
        """

    def on_fit_start(self, trainer: TrainerView) -> None:
        """At the start of ``fit``, after a checkpoint was restored and before the first step."""

    def on_train_step_start(self, trainer: TrainerView, step: int) -> None:
        """Before the batches of optimizer step ``step`` (``trainer.global_step + 1``) run."""

    def on_before_optimizer_step(self, trainer: TrainerView, optimizer: Any) -> None:
        """After the backward pass, with the gradients final: unscaled and clipped."""

    def on_after_optimizer_step(self, trainer: TrainerView, optimizer: Any) -> None:
        """After every optimizer step (every step, logged or not; reverse order).

        Also after a step the NaN guard or dynamic loss scaling skipped: ``optimizer`` then left
        the weights as they were. ``trainer.global_step`` is still the previous step's number;
        the schedulers have not stepped yet. The place to update an EMA of the weights.
        """

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """After each step whose training metrics are logged (every ``logging.log_steps``).

        Reverse order. ``metrics``' ``lr/...`` and ``weight_decay/...`` entries are read after the
        schedulers stepped: the values the *next* step (``global_step + 1``) uses.
        ``metrics`` is the record about to be logged; entries a callback adds are logged too.
        """

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Before each evaluation (``fit``'s, ``validate``, ``validate_all``).

        The optimizer is already in its ``eval()`` mode (see
        :class:`plugtrain.protocols.Optimizer`).
        """

    def on_validate_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """After each evaluation with its metrics (entries a callback adds are logged too).

        Reverse order; the optimizer returns to ``train()`` after the last of them.
        """

    def on_before_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """Before the checkpoint of ``step`` is written, on every process.

        The optimizer is already in its ``eval()`` mode. A callback may swap weights in here
        (the checkpoint then holds them) and must swap them back in
        :meth:`on_after_save_checkpoint`.
        """

    def on_save_checkpoint(self, trainer: TrainerView, path: Any) -> None:
        """After a checkpoint was written (atomically) to ``path``, on the main process."""

    def on_after_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """After the checkpoint of ``step`` was written, on every process (reverse order).

        Called after :meth:`on_save_checkpoint`; the optimizer returns to ``train()`` after
        the last of them.
        """

    def on_before_load_checkpoint(self, trainer: TrainerView, state: dict[str, Any]) -> None:
        """Before a checkpoint's contents are applied; removing a key from ``state`` skips it.

        The keys are ``model``, ``optimizer``, ``schedulers``, ``grad_scaler``, ``global_step``,
        ``dataloader``, ``callbacks`` and ``sparsity`` (those present in that checkpoint).
        """

    def on_load_checkpoint(self, trainer: TrainerView, path: Any) -> None:
        """After the checkpoint at ``path`` was restored."""

    def on_fit_end(self, trainer: TrainerView) -> None:
        """After ``fit`` finished training and saved its last checkpoint (reverse order)."""


@runtime_checkable
class Logger(Protocol):
    """Where metrics go (files, TensorBoard ...): called on the main process only.

    Listed in a run file as ``loggers: [{Name: {arguments}}]`` (registered through
    :func:`plugtrain.hookspecs.plugtrain_register_loggers`) or given as objects:
    ``Trainer(loggers=[...])``, besides the defaults ``ProgressLogger`` and
    ``MetricsFilesLogger`` (``Name: null`` removes one). A logger may also define any
    :class:`Callback` method and state: they are called after the callbacks', on the main
    process only (a logger opens its files in ``on_fit_start`` or ``on_validate_start``).
    """

    def log_metrics(self, step: int, split: str, metrics: Mapping[str, float]) -> None:
        """Record ``metrics`` of ``split`` (``"train"`` or ``"val"``) at ``step``."""

    def close(self) -> None:
        """Flush and release files; called once at the end of ``fit`` or ``validate``."""
