"""Hyperparameter schedules and update schedules of sparsity algorithms (no torch here).

A sparsity algorithm reads two kinds of schedule, as in cstorch 2.10:

- a :class:`HyperParameterSchedule` gives a value per step: the target ``sparsity`` or the
  ``drop_fraction``. :func:`make_schedule` builds one from what a run file or a Python caller
  writes: a number (``constant``), a list (``cycling``), a mapping ``{type: ..., **arguments}``
  (``constant``, ``linear``, ``exp``, ``power``, ``cosine``, ``cycling``, or a type a plugin
  registered through ``plugtrain_register_sparsity_schedules``, kind ``sparsity_schedule``; the
  type is case-insensitive), a callable (``lambda``, Python only) or a schedule already built;
- an :class:`UpdateSchedule` says whether a step is an update step (the mask may change).
  :func:`make_update_schedule` builds one from ``None`` (every step), ``{freq, start, stop}``,
  ``{steps: [...]}`` or a callable; they live in :mod:`plugtrain.bases.update_schedule` and are
  importable from here.

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

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from plugtrain.bases.curve import Curve
from plugtrain.bases.update_schedule import (
    FreqUpdateSchedule,
    ListUpdateSchedule,
    UpdateSchedule,
    make_update_schedule,
)
from plugtrain.errors import HyperParameterError, HyperParameterTypeError, PluginLoadError
from plugtrain.registry.schema import argument_problems, validated_arguments

if TYPE_CHECKING:
    from plugtrain.registry.components import Component

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
    """A value per algorithm step.

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
            training starts sparse, as in cstorch).
        """
        return Curve(self.at)

    def arguments(self) -> dict[str, Any]:
        """The constructor arguments, by name (a ``{type: ...}`` mapping without ``type``).

        An attrs subclass (a plugin's schedule type may be its own schema) gives its fields.
        """
        cls: Any = type(self)
        if attrs.has(cls):
            return {field.name: getattr(self, field.name) for field in attrs.fields(cls)}
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
    if found is not None:
        return found
    return _registered(type_value).load()  # type: ignore[no-any-return]


def _registered(type_value: str) -> Component:
    """The schedule type a plugin registered as ``type_value`` (kind ``sparsity_schedule``)."""
    from plugtrain.discovery.loading import get_registry
    from plugtrain.errors import DuplicateNameError, UnknownNameError

    registry = get_registry()
    try:
        return registry.lookup("sparsity_schedule", type_value)
    except DuplicateNameError as exc:
        raise HyperParameterError(str(exc), "type") from exc
    except UnknownNameError:
        pass
    valid = [*_WRITTEN_TYPES, *registry.names("sparsity_schedule")]
    message = f"Unknown schedule type {type_value!r}. Valid types: {', '.join(valid)}"
    if type_value.lower() in ("polynomial", "step"):
        message += f" (there is no {type_value.lower()!r} type)"
    raise HyperParameterError(message, "type")


def _from_plugin(type_value: str, given: Mapping[str, Any]) -> HyperParameterSchedule:
    """A plugin's schedule type, its arguments checked against its registered schema."""
    component = _registered(type_value)
    owner = f"{component.name} schedule"
    problems = argument_problems(component.schema_class, given)
    if problems:
        first = problems[0]
        placed = first.key in given
        about = f"{first.key} " if placed and not first.of_key else ""
        error = HyperParameterTypeError if first.of_key else HyperParameterError
        message = f"{owner}: {about}{first.message}"
        raise error(message, first.key if placed else None, unknown_key=first.of_key)
    arguments = validated_arguments(component.schema_class, given, owner=owner)
    try:
        schedule = component.load()(**arguments)
    except PluginLoadError as exc:
        raise HyperParameterError(str(exc), "type") from exc
    except (TypeError, ValueError) as exc:  # the plugin's own checks of its arguments
        raise HyperParameterError(f"{owner}: {exc}") from exc
    if not isinstance(schedule, HyperParameterSchedule):
        message = (
            f"sparsity schedule type {component.name!r} from {component.provider} built a "
            f"{type(schedule).__name__}, not a plugtrain.hyperparams.HyperParameterSchedule"
        )
        raise HyperParameterTypeError(message, "type")
    return schedule


def _from_mapping(spec: Mapping[str, Any]) -> HyperParameterSchedule:
    if "type" not in spec:
        raise HyperParameterError("Must specify `type`")
    given = {k: v for k, v in spec.items() if k != "type"}
    type_value = spec["type"]
    if isinstance(type_value, str) and type_value.lower() not in SCHEDULE_TYPES:
        return _from_plugin(type_value, given)
    cls = schedule_class(type_value)
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
    """A schedule from what a run file or a Python caller writes.

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
