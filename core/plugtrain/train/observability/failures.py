"""Failures outside the model: a callback or logger that raises costs no training work.

:meth:`Failures.blamed` turns an exception from a callback's or logger's method into a
:class:`~plugtrain.errors.ComponentFailedError` naming the component and the method (the
original is its ``__cause__``). The Trainer then saves the checkpoint of the last completed step
and stops (:func:`plugtrain.train.loop.training_loop.stop_after_failure`), unless the run said
to go on without that logger (``logging.on_error``): then it is dropped with one warning and the
fit continues.

Errors plugtrain raises on purpose (:class:`~plugtrain.errors.PlugtrainError`: a busy model
directory, a configuration error) and ``KeyboardInterrupt`` pass through unchanged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from plugtrain.discovery.attribution import describe_owner
from plugtrain.errors import ComponentFailedError, ConfigError, ConfigIssue, PlugtrainError

__all__ = ["Failures", "allow_failures", "describe_failure"]

log = logging.getLogger("plugtrain")


def describe_failure(owner: Any, hook: str, exc: BaseException) -> str:
    """``"callback 'X' from acme 1.0 raised ValueError in on_train_step_end: ..."``."""
    what = describe_owner(owner)
    if " from " not in what:  # not a registered component: a local or Python-API object
        kind = "logger" if callable(getattr(owner, "log_metrics", None)) else "callback"
        what = f"{kind} {type(owner).__name__} ({what})"
    return f"{what} raised {type(exc).__name__} in {hook}: {exc}"


class Failures:
    """Which callbacks and loggers may fail without stopping the fit, and which have.

    Shared by a Trainer's callback and logger dispatchers.
    """

    def __init__(self) -> None:
        self.go_on: set[int] = set()
        self.dropped: set[int] = set()
        self.failed: set[int] = set()
        """Those that raised and stopped the fit: closing them may raise again, quietly."""

    def allow(self, owner: Any) -> None:
        """Let the fit go on without ``owner`` when it raises (``logging.on_error: continue``)."""
        self.go_on.add(id(owner))

    def active(self, owner: Any) -> bool:
        """Whether ``owner`` is still called (it has not failed)."""
        return id(owner) not in self.dropped and id(owner) not in self.failed

    @contextlib.contextmanager
    def blamed(self, owner: Any, hook: str) -> Iterator[None]:
        """Re-raise an exception of ``owner``'s ``hook`` as :class:`ComponentFailedError`.

        An owner allowed to fail is dropped instead, with one warning.
        """
        try:
            yield
        except (PlugtrainError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            described = describe_failure(owner, hook, exc)
            if id(owner) not in self.go_on:
                if id(owner) in self.failed:  # its first failure is the one reported
                    log.debug("%s (again, after its first failure)", described)
                    return
                self.failed.add(id(owner))
                raise ComponentFailedError(described, owner, hook) from exc
            self.dropped.add(id(owner))
            log.warning("%s; going on without it (logging.on_error: continue)", described)


def allow_failures(failures: Failures, loggers: Sequence[Any], on_error: Any) -> None:
    """Apply ``logging.on_error``: ``"stop"``, ``"continue"`` or ``{logger name: either}``.

    A name matches a logger's registered name or its class name (case-insensitively).

    :raises ConfigError: a name that matches none of the loggers.
    """
    if isinstance(on_error, str):
        on_error = {type(logger).__name__: on_error for logger in loggers}
    named = {type(logger).__name__.lower(): logger for logger in loggers}
    for logger in loggers:
        component = describe_owner(logger)
        if " from " in component:
            registered = component.split("'")[1] if "'" in component else ""
            named.setdefault(registered.lower(), logger)
    for name, policy in (on_error or {}).items():
        logger = named.get(str(name).lower())
        if logger is None:
            listed = ", ".join(sorted(type(x).__name__ for x in loggers)) or "none"
            message = f"{name!r} is none of this trainer's loggers ({listed})"
            raise ConfigError([ConfigIssue(f"logging.on_error.{name}", message)])
        if policy == "continue":
            failures.allow(logger)
