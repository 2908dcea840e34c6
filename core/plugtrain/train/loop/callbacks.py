"""Calling a Trainer's callbacks through :class:`plugtrain.protocols.Callback`.

Which protocol methods each callback defines is read once, when the Trainer is created; the loop
then calls the collected methods in the order the callbacks were given, the closing hooks
(:data:`plugtrain.protocols.REVERSED_HOOKS`) in reverse. Callbacks with state
(``state_dict``/``load_state_dict``) have it saved in checkpoints under ``callbacks``, one entry
per callback in list order (then per logger, on the main process), matched back by class name
and occurrence (position only for entries without a name).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plugtrain.contract.protocols import CALLBACK_HOOKS, REVERSED_HOOKS, TrainerView
from plugtrain.registry._suggest import did_you_mean
from plugtrain.train.observability import Failures

__all__ = ["Callbacks"]

log = logging.getLogger("plugtrain")


class Callbacks:
    """The callbacks of one Trainer, by protocol method.

    :param callbacks: objects defining any of the Callback protocol's methods.
    """

    def __init__(self, callbacks: Sequence[Any]) -> None:
        self.callbacks = list(callbacks)
        self.failures = Failures()
        """Which of them may fail without stopping the fit, and which have."""
        self.hooks: dict[str, list[Callable[..., Any]]] = {name: [] for name in CALLBACK_HOOKS}
        for callback in callbacks:
            for name in CALLBACK_HOOKS:
                method = getattr(callback, name, None)
                if callable(method):
                    self.hooks[name].append(method)
            _warn_unknown_hooks(callback)
        for name in REVERSED_HOOKS:
            self.hooks[name].reverse()

    def call(self, hook: str, *args: Any) -> None:
        """Call every callback's ``hook(*args)``, in list order (a closing hook in reverse).

        :raises ComponentFailedError: naming the callback and hook that raised.
        """
        failures = self.failures
        for method in self.hooks[hook]:
            owner = getattr(method, "__self__", method)
            if failures.active(owner):
                with failures.blamed(owner, hook):
                    method(*args)

    def on_model_built(self, trainer: TrainerView, model: Any) -> Any:
        """Call every ``on_model_built(trainer, model)``; the model, as they left or replaced it.

        A callback returning a module replaces the model for the callbacks after it and the
        Trainer (``None``: changed in place, if at all).
        """
        failures = self.failures
        for method in self.hooks["on_model_built"]:
            owner = getattr(method, "__self__", method)
            if failures.active(owner):
                with failures.blamed(owner, "on_model_built"):
                    replaced = method(trainer, model)
                    model = model if replaced is None else replaced
        return model

    def building(self, trainer: TrainerView, build: Callable[[], Any]) -> Callable[[], Any]:
        """``build`` followed by :meth:`on_model_built` (each time a strategy calls it)."""
        return lambda: self.on_model_built(trainer, build())

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Call every ``on_fit_start(trainer)``."""
        self.call("on_fit_start", trainer)

    def on_train_step_start(self, trainer: TrainerView, step: int) -> None:
        """Call every ``on_train_step_start(trainer, step)``."""
        self.call("on_train_step_start", trainer, step)

    def on_before_optimizer_step(self, trainer: TrainerView, optimizer: Any) -> None:
        """Call every ``on_before_optimizer_step(trainer, optimizer)``."""
        self.call("on_before_optimizer_step", trainer, optimizer)

    def on_after_optimizer_step(self, trainer: TrainerView, optimizer: Any) -> None:
        """Call every ``on_after_optimizer_step(trainer, optimizer)`` (reverse order)."""
        self.call("on_after_optimizer_step", trainer, optimizer)

    def on_train_step_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Call every ``on_train_step_end(trainer, metrics)``."""
        self.call("on_train_step_end", trainer, metrics)

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Call every ``on_validate_start(trainer)``."""
        self.call("on_validate_start", trainer)

    def on_validate_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Call every ``on_validate_end(trainer, metrics)``."""
        self.call("on_validate_end", trainer, metrics)

    def on_before_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """Call every ``on_before_save_checkpoint(trainer, step)``."""
        self.call("on_before_save_checkpoint", trainer, step)

    def on_save_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        """Call every ``on_save_checkpoint(trainer, path)``."""
        self.call("on_save_checkpoint", trainer, path)

    def on_after_save_checkpoint(self, trainer: TrainerView, step: int) -> None:
        """Call every ``on_after_save_checkpoint(trainer, step)`` (reverse order)."""
        self.call("on_after_save_checkpoint", trainer, step)

    def on_before_load_checkpoint(self, trainer: TrainerView, state: dict[str, Any]) -> None:
        """Call every ``on_before_load_checkpoint(trainer, state)``."""
        self.call("on_before_load_checkpoint", trainer, state)

    def on_load_checkpoint(self, trainer: TrainerView, path: Path) -> None:
        """Call every ``on_load_checkpoint(trainer, path)``."""
        self.call("on_load_checkpoint", trainer, path)

    def on_fit_end(self, trainer: TrainerView) -> None:
        """Call every ``on_fit_end(trainer)``."""
        self.call("on_fit_end", trainer)

    def state_dict(self) -> list[dict[str, Any] | None]:
        """The callbacks' states for a checkpoint, one entry per callback.

        Each is ``{"name": class name, "state": its state_dict()}``, or ``None`` without state.
        """
        states: list[dict[str, Any] | None] = []
        for callback in self.callbacks:
            method = getattr(callback, "state_dict", None)
            if callable(method):
                states.append({"name": type(callback).__name__, "state": method()})
            else:
                states.append(None)
        return states

    def load_state_dict(self, states: Sequence[Any] | None, source: Any = "checkpoint") -> None:
        """Give each callback with ``load_state_dict`` its saved state.

        The saved entries are matched by class name and occurrence: the ``k``-th callback of a
        class gets the ``k``-th entry saved under that name, wherever it stood, so removing or
        adding another callback keeps every state. An entry saved without a name is matched by
        position. A callback with no saved state starts fresh, with a warning naming it.
        """
        saved = list(states or [])
        by_name: dict[str, list[Any]] = {}
        for entry in saved:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                by_name.setdefault(entry["name"], []).append(entry)
        seen: dict[str, int] = {}
        for index, callback in enumerate(self.callbacks):
            name = type(callback).__name__
            occurrence = seen.get(name, 0)
            seen[name] = occurrence + 1
            method = getattr(callback, "load_state_dict", None)
            if not callable(method):
                continue
            entry = _saved_entry(saved, by_name, name, occurrence, index)
            if entry is None:
                log.warning(
                    "%s: no saved state for callback %d (%s); it starts fresh", source, index, name
                )
                continue
            method(entry["state"])


def _saved_entry(
    saved: list[Any], by_name: dict[str, list[Any]], name: str, occurrence: int, index: int
) -> Mapping[str, Any] | None:
    """The saved entry of the ``occurrence``-th callback named ``name`` (at ``index``)."""
    named = by_name.get(name, [])
    if occurrence < len(named):
        entry: Mapping[str, Any] = named[occurrence]
        return entry
    positional = saved[index] if index < len(saved) else None
    if isinstance(positional, Mapping) and "name" not in positional and "state" in positional:
        return positional
    return None


def _warn_unknown_hooks(callback: Any) -> None:
    """Log methods named ``on_...`` that the Trainer never calls (usually a typo)."""
    for name in dir(type(callback)):
        if not name.startswith("on_") or name in CALLBACK_HOOKS:
            continue
        if callable(getattr(type(callback), name, None)):
            log.warning(
                "callback %s defines %s, which the Trainer never calls.%s Callback methods: %s",
                type(callback).__name__,
                name,
                did_you_mean(name, CALLBACK_HOOKS),
                ", ".join(CALLBACK_HOOKS),
            )
