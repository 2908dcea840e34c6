"""Calling a Trainer's callbacks through :class:`plugtrain.protocols.Callback`.

Which protocol methods each callback defines is read once, when the Trainer is created; the loop
then calls the collected methods in the order the callbacks were given. Callbacks with state
(``state_dict``/``load_state_dict``) have it saved in checkpoints under ``callbacks``, one entry
per callback in list order (then per logger, on the main process), matched back by position and
class name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from plugtrain._suggest import did_you_mean
from plugtrain.protocols import CALLBACK_HOOKS
from plugtrain.train.failures import Failures

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

    def call(self, hook: str, *args: Any) -> None:
        """Call every callback's ``hook(*args)``, in list order.

        :raises ComponentFailedError: naming the callback and hook that raised.
        """
        failures = self.failures
        for method in self.hooks[hook]:
            owner = getattr(method, "__self__", method)
            if failures.active(owner):
                with failures.blamed(owner, hook):
                    method(*args)

    def on_fit_start(self, trainer: Any) -> None:
        """Call every ``on_fit_start(trainer)``."""
        self.call("on_fit_start", trainer)

    def on_train_step_start(self, trainer: Any, step: int) -> None:
        """Call every ``on_train_step_start(trainer, step)``."""
        self.call("on_train_step_start", trainer, step)

    def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        """Call every ``on_before_optimizer_step(trainer, optimizer)``."""
        self.call("on_before_optimizer_step", trainer, optimizer)

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Call every ``on_train_step_end(trainer, metrics)``."""
        self.call("on_train_step_end", trainer, metrics)

    def on_validate_start(self, trainer: Any) -> None:
        """Call every ``on_validate_start(trainer)``."""
        self.call("on_validate_start", trainer)

    def on_validate_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        """Call every ``on_validate_end(trainer, metrics)``."""
        self.call("on_validate_end", trainer, metrics)

    def on_save_checkpoint(self, trainer: Any, path: Path) -> None:
        """Call every ``on_save_checkpoint(trainer, path)``."""
        self.call("on_save_checkpoint", trainer, path)

    def on_before_load_checkpoint(self, trainer: Any, state: dict[str, Any]) -> None:
        """Call every ``on_before_load_checkpoint(trainer, state)``."""
        self.call("on_before_load_checkpoint", trainer, state)

    def on_load_checkpoint(self, trainer: Any, path: Path) -> None:
        """Call every ``on_load_checkpoint(trainer, path)``."""
        self.call("on_load_checkpoint", trainer, path)

    def on_fit_end(self, trainer: Any) -> None:
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
        """Give each callback with ``load_state_dict`` its saved state (position and name match).

        A callback whose state is missing or saved under another class name starts fresh, with
        a warning naming it.
        """
        saved = list(states or [])
        for index, callback in enumerate(self.callbacks):
            method = getattr(callback, "load_state_dict", None)
            if not callable(method):
                continue
            name = type(callback).__name__
            entry = saved[index] if index < len(saved) else None
            if not isinstance(entry, Mapping) or entry.get("name") != name:
                log.warning(
                    "%s: no saved state for callback %d (%s); it starts fresh", source, index, name
                )
                continue
            method(entry["state"])


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
