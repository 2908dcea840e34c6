"""Update schedules of sparsity algorithms: which steps may change the masks (no torch here).

:func:`make_update_schedule` builds one from what a run file or a Python caller writes as a
group's ``update`` (cstorch's update schedules): ``None`` (every step), ``{freq, start, stop}``,
``{steps: [...]}``, a callable ``step -> bool`` or an :class:`UpdateSchedule`. ``step`` is the
algorithm's count of finished optimizer steps (1 after the first step); step 0 is asked only to
decide whether training starts sparse. Also importable from :mod:`plugtrain.hyperparams`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from plugtrain.errors import HyperParameterError, HyperParameterTypeError

__all__ = [
    "FreqUpdateSchedule",
    "ListUpdateSchedule",
    "UpdateSchedule",
    "make_update_schedule",
]


class UpdateSchedule:
    """Whether an algorithm step is an update step."""

    def __call__(self, step: int) -> bool:
        """Whether the mask may change after ``step`` finished optimizer steps."""
        raise NotImplementedError

    def count_before(self, step: int) -> int:
        """How many of the steps ``1 .. step - 1`` are update steps (for closed forms)."""
        return sum(1 for s in range(1, step) if self(s))

    def last_update(self, step: int) -> int | None:
        """The last update step among ``1 .. step`` (``None``: there is none)."""
        return next((s for s in range(step, 0, -1) if self(s)), None)

    def update_steps(self, last: int) -> list[int]:
        """The update steps among ``1 .. last``."""
        return [s for s in range(1, last + 1) if self(s)]


class FreqUpdateSchedule(UpdateSchedule):
    """Every ``freq`` steps from ``start``, before ``stop``.

    With ``start`` 0: ``step % freq == 0``; else ``step >= start`` and
    ``(step - start) % freq == 0``; and ``step < stop`` when ``stop`` is set.
    """

    def __init__(self, freq: int = 1, start: int = 0, stop: int | None = None) -> None:
        self.freq = _count(freq, "freq", minimum=1)
        self.start = _count(start, "start", minimum=0)
        self.stop = None if stop is None else _count(stop, "stop", minimum=0)

    def __call__(self, step: int) -> bool:
        """Whether ``step`` is an update step."""
        if self.stop is not None and step >= self.stop:
            return False
        if self.start == 0:
            return step % self.freq == 0
        return step >= self.start and (step - self.start) % self.freq == 0

    def count_before(self, step: int) -> int:
        """Update steps in ``1 .. step - 1``, by arithmetic."""
        last = step - 1
        if self.stop is not None:
            last = min(last, self.stop - 1)
        first = max(self.start, 1)
        if last < first:
            return 0
        # The update steps are start + k * freq (k >= 0) that are >= 1.
        k_first = -(-(first - self.start) // self.freq)
        k_last = (last - self.start) // self.freq
        return max(0, k_last - k_first + 1)

    def last_update(self, step: int) -> int | None:
        """The last update step among ``1 .. step``, by arithmetic."""
        last = step if self.stop is None else min(step, self.stop - 1)
        if last < max(self.start, 1):
            return None
        found = self.start + (last - self.start) // self.freq * self.freq
        return found if found >= 1 else None

    def __repr__(self) -> str:
        return f"FreqUpdateSchedule(freq={self.freq}, start={self.start}, stop={self.stop})"


class ListUpdateSchedule(UpdateSchedule):
    """The steps listed in ``steps``."""

    def __init__(self, steps: Iterable[int]) -> None:
        if isinstance(steps, (str, bytes, Mapping)) or not isinstance(steps, Iterable):
            message = f"update steps must be a list of step numbers, got {steps!r}"
            raise HyperParameterTypeError(message, "steps")
        self.steps = sorted({_count(s, f"steps[{i}]", minimum=0) for i, s in enumerate(steps)})

    def __call__(self, step: int) -> bool:
        """Whether ``step`` is listed."""
        index = bisect.bisect_left(self.steps, step)
        return index < len(self.steps) and self.steps[index] == step

    def count_before(self, step: int) -> int:
        """Listed steps in ``1 .. step - 1``."""
        if step <= 1:
            return 0
        return bisect.bisect_left(self.steps, step) - bisect.bisect_left(self.steps, 1)

    def last_update(self, step: int) -> int | None:
        """The last listed step among ``1 .. step``."""
        index = bisect.bisect_right(self.steps, step) - 1
        return self.steps[index] if index >= 0 and self.steps[index] >= 1 else None

    def __repr__(self) -> str:
        return f"ListUpdateSchedule(steps={self.steps})"


class _CallableUpdateSchedule(UpdateSchedule):
    def __init__(self, fn: Callable[[int], bool]) -> None:
        self.fn: Callable[[int], bool] = fn

    def __call__(self, step: int) -> bool:
        return bool(self.fn(step))

    def __repr__(self) -> str:
        return f"UpdateSchedule({self.fn!r})"


def _count(value: Any, key: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        message = f"update {key} must be an integer, got {type(value).__name__} {value!r}"
        raise HyperParameterTypeError(message, key.split("[", maxsplit=1)[0])
    if value < minimum:
        message = f"update {key} must be >= {minimum}, got {value}"
        raise HyperParameterError(message, key.split("[", maxsplit=1)[0])
    return value


_UPDATE_OPTIONS = (
    "- None (or no `update`): every step",
    "- {freq: int >= 1, start: int = 0, stop: int or None = None}",
    "- {steps: [int, ...]}",
    "- a callable step -> bool (Python only)",
)


def _invalid_update(update: Any) -> HyperParameterError:
    message = f"Invalid `update`: {update!r}. Valid options are:\n" + "\n".join(_UPDATE_OPTIONS)
    return HyperParameterError(message)


def make_update_schedule(update: Any) -> UpdateSchedule:
    """The update schedule written as ``update``.

    :param update: ``None`` (every step), a mapping ``{freq, start, stop}`` (``freq`` given),
        a mapping ``{steps: [...]}``, a callable ``step -> bool`` or an :class:`UpdateSchedule`.
    :raises HyperParameterError: for another value, a mapping with neither ``freq`` nor
        ``steps`` or with both, an unknown key, or a value of the wrong type.
    """
    if update is None:
        return FreqUpdateSchedule()
    if isinstance(update, UpdateSchedule):
        return update
    if isinstance(update, Mapping):
        if "steps" in update:
            others = [str(k) for k in update if k != "steps"]
            if others:
                message = (
                    f"update with `steps` takes no other key, got {others[0]!r} (give either "
                    "`steps` or `freq`/`start`/`stop`)"
                )
                raise HyperParameterTypeError(message, others[0], unknown_key=True)
            return ListUpdateSchedule(update["steps"])
        if "freq" in update:
            for key in update:
                if key not in ("freq", "start", "stop"):
                    message = (
                        f"update got an unexpected key {key!r}; with `freq` the keys are: "
                        "freq, start, stop"
                    )
                    raise HyperParameterTypeError(message, str(key), unknown_key=True)
            return FreqUpdateSchedule(**update)
        raise _invalid_update(update)
    if callable(update) and not isinstance(update, type):
        return _CallableUpdateSchedule(update)
    raise _invalid_update(update)
