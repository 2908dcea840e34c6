"""Cerebras csx.* flags: for the process, for fit, or for each evaluation.

The flags go to the backend's optional ``apply_flags`` (the CSX backend hands them to the
Cerebras stack); elsewhere they have no effect, which is reported once.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from plugtrain.backend_base import report_inactive_flags
from plugtrain.protocols import TrainerView
from plugtrain.schema import constructor_signature, validated_arguments
from plugtrain_callbacks.schemas import (
    GlobalFlagsArgs,
    ScopedTrainFlagsArgs,
    ScopedValidateFlagsArgs,
    flag_name,
)

__all__ = ["GlobalFlags", "ScopedTrainFlags", "ScopedValidateFlags"]


class _Flags:
    schema: ClassVar[type]
    __signature__: ClassVar[inspect.Signature]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__signature__ = constructor_signature(cls.schema)  # the schema's arguments

    def __init__(self, **flags: Any) -> None:
        checked = validated_arguments(self.schema, flags, owner=type(self).__name__)
        self.flags: dict[str, Any] = {
            flag_name(key): value for key, value in checked.items() if value is not None
        }
        """The flags by dotted name: ``{"csx.performance.micro_batch_size": 2}``."""
        self._previous: dict[str, Any] | None = None

    def _apply(self, trainer: TrainerView, flags: dict[str, Any]) -> dict[str, Any]:
        backend = trainer.backend
        apply = getattr(backend, "apply_flags", None)
        if not callable(apply):
            report_inactive_flags(str(getattr(backend, "backend_type", "")), flags)
            return {}
        return dict(apply(flags))

    def _set(self, trainer: TrainerView) -> None:
        if self._previous is None:
            self._previous = self._apply(trainer, self.flags)

    def _restore(self, trainer: TrainerView) -> None:
        if self._previous is not None:
            if self._previous:
                self._apply(trainer, self._previous)
            self._previous = None


class GlobalFlags(_Flags):
    """Sets the flags once, at the first ``fit`` or ``validate``, and leaves them set."""

    schema = GlobalFlagsArgs

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Set the flags (once)."""
        self._set(trainer)

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Set the flags (once)."""
        self._set(trainer)


class ScopedTrainFlags(_Flags):
    """Sets the flags for the duration of each ``fit`` and restores them after it."""

    schema = ScopedTrainFlagsArgs

    def on_fit_start(self, trainer: TrainerView) -> None:
        """Set the flags."""
        self._set(trainer)

    def on_fit_end(self, trainer: TrainerView) -> None:
        """Restore the values they had."""
        self._restore(trainer)


class ScopedValidateFlags(_Flags):
    """Sets the flags for each evaluation and restores them after it."""

    schema = ScopedValidateFlagsArgs

    def on_validate_start(self, trainer: TrainerView) -> None:
        """Set the flags."""
        self._set(trainer)

    def on_validate_end(self, trainer: TrainerView, metrics: dict[str, float]) -> None:
        """Restore the values they had."""
        self._restore(trainer)
