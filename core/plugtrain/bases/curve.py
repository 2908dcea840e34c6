"""A closed-form schedule: the value as a pure function of the step (no torch here).

A scheduler that can say its value at any step without running offers a :class:`Curve` (see
:class:`plugtrain.protocols.Curve`): ``plugtrain plot`` draws it without torch, and wrappers
such as ``SequentialLR`` evaluate it at their own step instead of stepping the child.
:func:`closed_form` evaluates a scheduler written ``{Name: {arguments}}`` through its schema
(:class:`plugtrain.protocols.CurveSchema`), for ``plot`` and ``check``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.registry.schema import validated_arguments

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = ["ClosedForm", "Curve", "as_curve", "closed_form", "running_totals", "spec_parts"]


class Curve:
    """A schedule: ``at(step)`` gives its value; ``length`` its natural number of steps.

    ``length`` is what a ``SequentialLR`` parent uses as the child's share of the steps when its
    milestones are omitted (``None`` when the schedule has no ``total_iters``).

    :param at: the value after ``step`` calls of ``step()``; ``at(0)`` is the value written at
        construction. It must not depend on earlier calls (plot and wrappers call it in any
        order).
    :param length: the natural number of steps, or ``None``.
    """

    __slots__ = ("at", "length")

    def __init__(self, at: Callable[[int], float], length: int | None = None) -> None:
        self.at = at
        self.length = length

    def __call__(self, step: int) -> float:
        """The value at ``step``."""
        return self.at(step)

    def __repr__(self) -> str:
        return f"Curve(at={self.at!r}, length={self.length!r})"


def as_curve(value: Any, owner: str | Callable[[], str]) -> Curve | None:
    """A plugin's curve as the core uses it (:class:`plugtrain.protocols.Curve`), or ``None``.

    A curve with ``at`` is returned as it is (given ``length = None`` when it has none). Under
    plugin API 1.0 a curve could be a plain callable of the step (``curve(step)``, with an
    optional ``length``); such a curve is wrapped in a :class:`Curve`, so 1.0 plugins keep
    working.

    :param owner: who provided it, for the error (``"scheduler 'WSD' from acme-wsd 0.1.0"``),
        or a function giving it (called only for the error).
    :raises PluginContractError: for anything else, naming ``owner``.
    """
    from plugtrain.errors import PluginContractError

    if value is None or isinstance(value, Curve):
        return value
    at = getattr(value, "at", None)
    if callable(at):
        if hasattr(value, "length"):
            return value  # type: ignore[no-any-return]
        return Curve(at, None)
    if callable(value):
        return Curve(value, getattr(value, "length", None))
    who = owner if isinstance(owner, str) else owner()
    message = (
        f"{who}: its curve is a {type(value).__name__}, which is not a "
        "plugtrain.protocols.Curve (at(step) and length); return plugtrain.curve.Curve(at, "
        "length) from the schema's curve()"
    )
    raise PluginContractError(message)


def running_totals(lengths: Sequence[int | None]) -> list[int]:
    """Default milestones of a sequence: the running totals of all lengths but the last.

    :param lengths: each child's natural length (``None``: it has none).
    :raises ValueError: when a child (but the last) has no length.
    """
    totals = []
    done = 0
    for i, length in enumerate(lengths[:-1]):
        if length is None:
            message = (
                f"milestones are omitted but scheduler {i} has no total_iters to derive them "
                "from; give milestones"
            )
            raise ValueError(message)
        done += length
        totals.append(done)
    return totals


@attrs.frozen
class ClosedForm:
    """The closed form of a scheduler written as ``{Name: {arguments}}``.

    :param name: the name as written.
    :param key: the param-group key it schedules (its schema's ``schedule_key``).
    :param arguments: its validated arguments.
    :param curve: its values.
    """

    name: str
    key: str
    arguments: Mapping[str, Any]
    curve: Curve


def spec_parts(spec: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    """The name and the arguments of ``{Name: {arguments}}``.

    :raises ConfigError: when ``spec`` has another shape.
    """
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ConfigError([ConfigIssue(where, "a scheduler is a one-key mapping {Name: {args}}")])
    ((name, arguments),) = spec.items()
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        message = f"arguments of {name} must be a mapping, got {type(arguments).__name__}"
        raise ConfigError([ConfigIssue(where, message)])
    return str(name), arguments


def closed_form(registry: Registry, spec: Any, where: str = "scheduler") -> ClosedForm:
    """Evaluate a scheduler's schema into its curve, nested schedulers included, without torch.

    Nested schedulers are reported under ``where.Name[i]``.

    :raises NotImplementedError: when the scheduler or one nested in it has no closed form.
    :raises ConfigError: for a malformed spec or bad arguments.
    :raises ValueError: when the schema refuses the combination (omitted milestones without
        lengths, a chain starting at 0 ...).
    """
    name, given = spec_parts(spec, where)
    schema = registry.lookup("scheduler", name).schema_class
    curve_of = getattr(schema, "curve", None)
    if not callable(curve_of):
        message = f"scheduler {name!r} has no closed form"
        raise NotImplementedError(message)
    arguments = validated_arguments(schema, given, owner=where)
    counter = itertools.count()

    def child_curve(child: Any) -> Curve:
        return closed_form(registry, child, f"{where}.{name}[{next(counter)}]").curve

    owner = f"scheduler {name!r} from {registry.lookup('scheduler', name).provider}"
    curve = as_curve(curve_of(arguments, child_curve), owner)
    if curve is None:
        message = f"{owner}: its schema's curve() returned None (raise NotImplementedError)"
        raise NotImplementedError(message)
    key = str(getattr(schema, "schedule_key", "lr"))
    return ClosedForm(name, key, arguments, curve)
