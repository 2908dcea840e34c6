"""What plugtrain requires of callbacks and loggers, and the order of the callback hooks.

Part of the public :mod:`plugtrain.protocols` (import them from there): :class:`Callback`,
:class:`Logger`, :data:`CALLBACK_HOOKS` and :data:`REVERSED_HOOKS` are written here, apart from
the protocols of the components a run is built of. This module does not import torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["CALLBACK_HOOKS", "REVERSED_HOOKS", "Callback", "Logger"]


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

    What a callback may read of the trainer: ``model``, ``optimizer``, ``schedulers``,
    ``backend``, ``model_dir``, ``loop``, ``checkpoint``, ``logging``, ``global_step``,
    ``target_step`` (the step the running fit ends at), ``samples_seen`` (training examples this
    process drew in the fit), ``is_main_process``, ``callbacks``, ``loggers`` and ``sparsity``
    (``None``, or the run's :class:`plugtrain.train.loop.sparsity.Sparsity`: its ``groups`` each
    have ``algorithm`` and ``params``, each parameter ``name`` and ``mask``).
    """

    def on_model_built(self, trainer: Any, model: Any) -> Any:
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

    def on_fit_start(self, trainer: Any) -> None:
        """At the start of ``fit``, after a checkpoint was restored and before the first step."""

    def on_train_step_start(self, trainer: Any, step: int) -> None:
        """Before the batches of optimizer step ``step`` (``trainer.global_step + 1``) run."""

    def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        """After the backward pass, with the gradients final: unscaled and clipped."""

    def on_after_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        """After every optimizer step (every step, logged or not; reverse order).

        Also after a step the NaN guard or dynamic loss scaling skipped: ``optimizer`` then left
        the weights as they were. ``trainer.global_step`` is still the previous step's number;
        the schedulers have not stepped yet. The place to update an EMA of the weights.
        """

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """After each step whose training metrics are logged (every ``logging.log_steps``).

        Reverse order. ``metrics``' ``lr/...`` and ``weight_decay/...`` entries are read after the
        schedulers stepped: the values the *next* step (``global_step + 1``) uses.
        ``metrics`` is the record about to be logged; entries a callback adds are logged too.
        """

    def on_validate_start(self, trainer: Any) -> None:
        """Before each evaluation (``fit``'s, ``validate``, ``validate_all``).

        The optimizer is already in its ``eval()`` mode (see
        :class:`plugtrain.protocols.Optimizer`).
        """

    def on_validate_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """After each evaluation with its metrics (entries a callback adds are logged too).

        Reverse order; the optimizer returns to ``train()`` after the last of them.
        """

    def on_before_save_checkpoint(self, trainer: Any, step: int) -> None:
        """Before the checkpoint of ``step`` is written, on every process.

        The optimizer is already in its ``eval()`` mode. A callback may swap weights in here
        (the checkpoint then holds them) and must swap them back in
        :meth:`on_after_save_checkpoint`.
        """

    def on_save_checkpoint(self, trainer: Any, path: Any) -> None:
        """After a checkpoint was written (atomically) to ``path``, on the main process."""

    def on_after_save_checkpoint(self, trainer: Any, step: int) -> None:
        """After the checkpoint of ``step`` was written, on every process (reverse order).

        Called after :meth:`on_save_checkpoint`; the optimizer returns to ``train()`` after
        the last of them.
        """

    def on_before_load_checkpoint(self, trainer: Any, state: dict[str, Any]) -> None:
        """Before a checkpoint's contents are applied; removing a key from ``state`` skips it.

        The keys are ``model``, ``optimizer``, ``schedulers``, ``grad_scaler``, ``global_step``,
        ``dataloader``, ``callbacks`` and ``sparsity`` (those present in that checkpoint).
        """

    def on_load_checkpoint(self, trainer: Any, path: Any) -> None:
        """After the checkpoint at ``path`` was restored."""

    def on_fit_end(self, trainer: Any) -> None:
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
