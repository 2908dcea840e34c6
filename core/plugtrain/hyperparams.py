"""Hyperparameter schedules and update schedules of sparsity algorithms (no torch here).

A sparsity algorithm reads two kinds of schedule (SPEC-sparsity sections 2.4 and 3):

- a :class:`HyperParameterSchedule` gives a value per step: the target ``sparsity`` or the
  ``drop_fraction``. :func:`make_schedule` builds one from what a run file or a Python caller
  writes: a number (``constant``), a list (``cycling``), a mapping ``{type: ..., **arguments}``
  (``constant``, ``linear``, ``exp``, ``power``, ``cosine``, ``cycling``; the type is
  case-insensitive), a callable (``lambda``, Python only) or a schedule already built;
- an :class:`UpdateSchedule` says whether a step is an update step (the mask may change).
  :func:`make_update_schedule` builds one from ``None`` (every step), ``{freq, start, stop}``,
  ``{steps: [...]}`` or a callable.

``step`` is the algorithm's count of finished optimizer steps (1 after the first step); step 0
is asked only to decide whether training starts sparse. Every schedule but ``cycling`` is a pure
function of the step; ``cycling`` moves to its next value when
:meth:`~HyperParameterSchedule.update` is told the step was an update step, and its position is
its state.

``plugtrain plot`` draws a schedule through :meth:`HyperParameterSchedule.curve`, which needs the
update schedule for ``cycling`` only.

Bad input raises :class:`HyperParameterError` (a ``ValueError``; an unknown argument or a value
of the wrong type is also a ``TypeError``), whose ``key`` names the offending key of a mapping
(``None`` when the value as a whole is wrong), so that a run file can place the message.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from plugtrain.curve import Curve
from plugtrain.errors import PlugtrainError

__all__ = [
    "SCHEDULE_TYPES",
    "ConstantHyperParameter",
    "CosineHyperParameter",
    "CyclingHyperParameter",
    "ExpHyperParameter",
    "FreqUpdateSchedule",
    "HyperParameterError",
    "HyperParameterSchedule",
    "HyperParameterTypeError",
    "LambdaHyperParameter",
    "LinearHyperParameter",
    "ListUpdateSchedule",
    "PowerHyperParameter",
    "UpdateSchedule",
    "make_schedule",
    "make_update_schedule",
]


class HyperParameterError(PlugtrainError, ValueError):
    """A schedule or an update schedule that cannot be built.

    :param message: what is wrong.
    :param key: the key of the mapping the message is about (``"type"``, ``"freq"`` ...), or
        ``None`` when it is about the value as a whole.
    :param unknown_key: ``key`` itself is wrong (an unknown argument), not its value.
    """

    def __init__(self, message: str, key: str | None = None, *, unknown_key: bool = False) -> None:
        super().__init__(message)
        self.key = key
        self.unknown_key = unknown_key


class HyperParameterTypeError(HyperParameterError, TypeError):
    """A :class:`HyperParameterError` that cstorch raises as ``TypeError`` (an unknown argument)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any, key: str, owner: str) -> float:
    if not _is_number(value):
        message = f"{owner}: {key} must be a number, got {type(value).__name__} {value!r}"
        raise HyperParameterTypeError(message, key)
    number = float(value)
    if not math.isfinite(number):
        message = f"{owner}: {key} must be finite, got {value!r}"
        raise HyperParameterError(message, key)
    return number


class HyperParameterSchedule:
    """A value per algorithm step (SPEC-sparsity section 3).

    Subclasses set :attr:`type_name` and :attr:`parameters` (the constructor arguments that a
    ``{type: ...}`` mapping may give, with their defaults) and implement :meth:`at`.
    """

    type_name: ClassVar[str]
    """The name written as ``type:`` (lower case)."""

    parameters: ClassVar[Mapping[str, Any]] = {}
    """Constructor argument names, each with its default (:data:`REQUIRED_ARGUMENT`: none)."""

    def at(self, step: int) -> float:
        """The value at ``step``, from the arguments and the state."""
        raise NotImplementedError

    def __call__(self, step: int) -> float:
        """The value at ``step``."""
        return self.at(step)

    def update(self, is_update_step: bool) -> None:
        """Called after every algorithm step; only ``cycling`` moves (on update steps)."""

    def state_dict(self) -> dict[str, Any]:
        """What changes in training: ``{}`` for every type but ``cycling``."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (nothing for a stateless schedule)."""

    def curve(self, update_schedule: UpdateSchedule | None = None, *, advances: int = 0) -> Curve:
        """The value of every step as a closed form, from a freshly built schedule.

        :param update_schedule: the steps on which :meth:`update` is told ``True`` (needed by
            ``cycling`` only; ``None`` = every step).
        :param advances: extra moves before step 1 (``cycling`` sparsity moves once when
            training starts sparse, SPEC-sparsity section 3).
        """
        return Curve(self.at)

    def arguments(self) -> dict[str, Any]:
        """The constructor arguments, by name (a ``{type: ...}`` mapping without ``type``)."""
        return {name: getattr(self, name) for name in self.parameters}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.arguments().items())
        return f"{type(self).__name__}({shown})"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED_ARGUMENT: Any = _Required()
"""The default of a schedule argument that must be given."""


class ConstantHyperParameter(HyperParameterSchedule):
    """``value`` at every step."""

    type_name = "constant"
    parameters: ClassVar[Mapping[str, Any]] = {"value": REQUIRED_ARGUMENT}

    def __init__(self, value: float) -> None:
        self.value = _number(value, "value", "constant schedule")

    def at(self, step: int) -> float:
        """``value``."""
        return self.value


class LinearHyperParameter(HyperParameterSchedule):
    """``init + slope * step`` (not clamped)."""

    type_name = "linear"
    parameters: ClassVar[Mapping[str, Any]] = {
        "init": REQUIRED_ARGUMENT,
        "slope": REQUIRED_ARGUMENT,
    }

    def __init__(self, init: float, slope: float) -> None:
        self.init = _number(init, "init", "linear schedule")
        self.slope = _number(slope, "slope", "linear schedule")

    def at(self, step: int) -> float:
        """``init + slope * step``."""
        return self.init + self.slope * step


class ExpHyperParameter(HyperParameterSchedule):
    """``final - (final - init) * exp(gamma * step)``; a negative ``gamma`` approaches ``final``."""

    type_name = "exp"
    parameters: ClassVar[Mapping[str, Any]] = {
        "init": REQUIRED_ARGUMENT,
        "gamma": REQUIRED_ARGUMENT,
        "final": 1,
    }

    def __init__(self, init: float, gamma: float, final: float = 1) -> None:
        self.init = _number(init, "init", "exp schedule")
        self.gamma = _number(gamma, "gamma", "exp schedule")
        self.final = _number(final, "final", "exp schedule")

    def at(self, step: int) -> float:
        """``final - (final - init) * exp(gamma * step)``."""
        return self.final - (self.final - self.init) * math.exp(self.gamma * step)


class PowerHyperParameter(HyperParameterSchedule):
    """``init * beta ** step``."""

    type_name = "power"
    parameters: ClassVar[Mapping[str, Any]] = {
        "init": REQUIRED_ARGUMENT,
        "beta": REQUIRED_ARGUMENT,
    }

    def __init__(self, init: float, beta: float) -> None:
        self.init = _number(init, "init", "power schedule")
        self.beta = _number(beta, "beta", "power schedule")

    def at(self, step: int) -> float:
        """``init * beta ** step``."""
        return self.init * self.beta**step


class CosineHyperParameter(HyperParameterSchedule):
    """From ``init`` to ``minimum`` over ``half_period`` steps along a cosine, then back (periodic).

    ``(init + minimum) / 2 + (init - (init + minimum) / 2) * cos(pi * step / half_period)``.
    """

    type_name = "cosine"
    parameters: ClassVar[Mapping[str, Any]] = {
        "init": REQUIRED_ARGUMENT,
        "half_period": REQUIRED_ARGUMENT,
        "minimum": 0,
    }

    def __init__(self, init: float, half_period: float, minimum: float = 0) -> None:
        self.init = _number(init, "init", "cosine schedule")
        self.half_period = _number(half_period, "half_period", "cosine schedule")
        if self.half_period <= 0:
            message = f"cosine schedule: half_period must be > 0, got {half_period!r}"
            raise HyperParameterError(message, "half_period")
        self.minimum = _number(minimum, "minimum", "cosine schedule")

    def at(self, step: int) -> float:
        """The cosine's value at ``step``."""
        middle = (self.init + self.minimum) / 2
        return middle + (self.init - middle) * math.cos(math.pi * step / self.half_period)


class CyclingHyperParameter(HyperParameterSchedule):
    """``values[index]``; ``index`` starts at 0 and moves on (wrapping) on each update step."""

    type_name = "cycling"
    parameters: ClassVar[Mapping[str, Any]] = {"values": REQUIRED_ARGUMENT}

    def __init__(self, values: Sequence[float]) -> None:
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            message = (
                f"cycling schedule: values must be a list of numbers, got "
                f"{type(values).__name__} {values!r}"
            )
            raise HyperParameterTypeError(message, "values")
        if not values:
            raise HyperParameterError("cycling schedule: values must not be empty", "values")
        self.values = [_number(v, f"values[{i}]", "cycling schedule") for i, v in enumerate(values)]
        self.index = 0

    def at(self, step: int) -> float:
        """The value at the current position (``step`` does not matter)."""
        return self.values[self.index]

    def update(self, is_update_step: bool) -> None:
        """Move to the next value on an update step."""
        if is_update_step:
            self.index = (self.index + 1) % len(self.values)

    def state_dict(self) -> dict[str, Any]:
        """``{"index": position}``."""
        return {"index": self.index}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the position (a plain int or a 0-dim tensor).

        :raises HyperParameterError: when the state has no valid ``index``.
        """
        if "index" not in state:
            raise HyperParameterError(f"cycling schedule state has no 'index': {dict(state)!r}")
        index = int(state["index"])
        if not 0 <= index < len(self.values):
            message = f"cycling schedule state index {index} is outside 0..{len(self.values) - 1}"
            raise HyperParameterError(message)
        self.index = index

    def curve(self, update_schedule: UpdateSchedule | None = None, *, advances: int = 0) -> Curve:
        """``values[(index + advances + update steps in 1..step-1) % len(values)]``.

        Step 0 (initialisation) has ``values[index]``: the moves come after it.
        """
        updates = update_schedule if update_schedule is not None else FreqUpdateSchedule()
        first, start, values = self.index, self.index + advances, list(self.values)

        def at(step: int) -> float:
            if step <= 0:
                return values[first]
            return values[(start + updates.count_before(step)) % len(values)]

        return Curve(at)

    def arguments(self) -> dict[str, Any]:
        """``{"values": [...]}``."""
        return {"values": list(self.values)}


class LambdaHyperParameter(HyperParameterSchedule):
    """``fn(step)`` (Python only: a run file cannot hold a function)."""

    type_name = "lambda"
    parameters: ClassVar[Mapping[str, Any]] = {"fn": REQUIRED_ARGUMENT}

    def __init__(self, fn: Any) -> None:
        if not callable(fn):
            message = f"lambda schedule: fn must be callable, got {type(fn).__name__} {fn!r}"
            raise HyperParameterTypeError(message, "fn")
        self.fn: Callable[[int], float] = fn

    def at(self, step: int) -> float:
        """``float(fn(step))``."""
        return float(self.fn(step))


SCHEDULE_TYPES: dict[str, type[HyperParameterSchedule]] = {
    cls.type_name: cls
    for cls in (
        ConstantHyperParameter,
        LinearHyperParameter,
        ExpHyperParameter,
        PowerHyperParameter,
        CosineHyperParameter,
        CyclingHyperParameter,
        LambdaHyperParameter,
    )
}
"""Every schedule type by its ``type:`` name."""

_WRITTEN_TYPES = sorted(name for name in SCHEDULE_TYPES if name != "lambda")


def _unhandled(value: Any) -> HyperParameterTypeError:
    bullets = [
        "- a number (int or float): a constant value",
        "- a list of numbers: cycled through on update steps",
        "- a callable step -> value (Python only)",
        "- a HyperParameterSchedule",
        f'- a mapping {{"type": one of {_WRITTEN_TYPES}, ...arguments}}',
    ]
    message = f"Unhandled {value!r}. Options are:\n" + "\n".join(bullets)
    return HyperParameterTypeError(message)


def schedule_class(type_value: Any) -> type[HyperParameterSchedule]:
    """The schedule class named ``type_value`` (case-insensitive).

    :raises HyperParameterError: naming the valid types (``key`` is ``"type"``).
    """
    if not isinstance(type_value, str):
        message = (
            f"schedule type must be a string, one of {_WRITTEN_TYPES}, got "
            f"{type(type_value).__name__} {type_value!r}"
        )
        raise HyperParameterTypeError(message, "type")
    found = SCHEDULE_TYPES.get(type_value.lower())
    if found is None:
        message = f"Unknown schedule type {type_value!r}. Valid types: {', '.join(_WRITTEN_TYPES)}"
        if type_value.lower() in ("polynomial", "step"):
            message += f" (there is no {type_value.lower()!r} type)"
        raise HyperParameterError(message, "type")
    return found


def _from_mapping(spec: Mapping[str, Any]) -> HyperParameterSchedule:
    if "type" not in spec:
        raise HyperParameterError("Must specify `type`")
    cls = schedule_class(spec["type"])
    given = {k: v for k, v in spec.items() if k != "type"}
    for key in given:
        if key not in cls.parameters:
            valid = ", ".join(cls.parameters)
            message = (
                f"{cls.type_name} schedule got an unexpected argument {key!r}; its arguments "
                f"are: {valid}"
            )
            raise HyperParameterTypeError(message, str(key), unknown_key=True)
    for name, default in cls.parameters.items():
        if default is REQUIRED_ARGUMENT and name not in given:
            needed = ", ".join(n for n, d in cls.parameters.items() if d is REQUIRED_ARGUMENT)
            message = f"{cls.type_name} schedule needs {name!r} (it needs: {needed})"
            raise HyperParameterError(message, None)
    return cls(**given)


def make_schedule(value: Any) -> HyperParameterSchedule:
    """A schedule from what a run file or a Python caller writes (SPEC-sparsity section 3).

    :param value: a number (``constant``), a list of numbers (``cycling``), a mapping with a
        case-insensitive ``type`` and that type's arguments, a callable ``step -> value``
        (``lambda``) or a :class:`HyperParameterSchedule` (returned as it is).
    :raises HyperParameterError: for anything else, an unknown type, a missing ``type``, an
        unknown or missing argument or an argument of the wrong type.
    """
    if isinstance(value, HyperParameterSchedule):
        return value
    if _is_number(value):
        return ConstantHyperParameter(value)
    if isinstance(value, (list, tuple)):
        return CyclingHyperParameter(value)
    if isinstance(value, Mapping):
        return _from_mapping(value)
    if callable(value) and not isinstance(value, type):
        return LambdaHyperParameter(value)
    raise _unhandled(value)


# -- update schedules ---------------------------------------------------------------------------


class UpdateSchedule:
    """Whether an algorithm step is an update step (SPEC-sparsity section 2.4)."""

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
    """The update schedule written as ``update`` (SPEC-sparsity section 2.4).

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
