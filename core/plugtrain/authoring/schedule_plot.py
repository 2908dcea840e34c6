"""Schedules as numbers and pictures, without torch: what ``plugtrain plot`` draws.

A scheduler's schema may offer a torch-free closed form: ``schedule_key`` (``"lr"`` or
``"weight_decay"``) and a staticmethod ``curve(arguments, child_curve)`` returning the
value-of-step function for validated arguments (nested schedulers are handed over as
``{Name: {arguments}}`` mappings and turned into curves with ``child_curve``). This module
evaluates such schemas through the registry; matplotlib is needed only by
:func:`plot_schedules` and imported there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from plugtrain.errors import ConfigError, ConfigIssue
from plugtrain.schema import validated_arguments

if TYPE_CHECKING:
    from plugtrain.registry import Registry

__all__ = ["DEFAULT_STEPS", "ScheduleCurve", "plot_schedules", "schedule_curves"]

DEFAULT_STEPS = 1000
"""Steps drawn when neither the caller nor any schedule says how long it is."""

_AXIS_TITLES = {"lr": "learning rate", "weight_decay": "weight decay"}


@attrs.frozen
class ScheduleCurve:
    """The values one scheduler writes into the groups carrying one tag.

    :param index: position of the scheduler in the list given.
    :param name: the scheduler's name as written.
    :param key: the param-group key it schedules, ``"lr"`` or ``"weight_decay"``.
    :param tag: the targeted tag (``None``: untagged groups), or ``"*"`` for every group.
    :param steps: the steps evaluated.
    :param values: the value at each of ``steps``.
    """

    index: int
    name: str
    key: str
    tag: str | None
    steps: tuple[int, ...]
    values: tuple[float, ...]

    @property
    def label(self) -> str:
        """``"CosineDecayWD [bias_params]"``, ``"SequentialLR"`` for every group."""
        if self.tag == "*":
            return self.name
        return f"{self.name} [{'untagged' if self.tag is None else self.tag}]"


def _spec_parts(spec: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ConfigError([ConfigIssue(where, "a scheduler is a one-key mapping {Name: {args}}")])
    ((name, arguments),) = spec.items()
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        message = f"arguments of {name} must be a mapping, got {type(arguments).__name__}"
        raise ConfigError([ConfigIssue(where, message)])
    return str(name), arguments


class _Evaluator:
    """Builds curves of scheduler specs through a registry's schemas."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def schema(self, name: str, where: str) -> type:
        schema = self.registry.lookup("scheduler", name).schema_class
        if not callable(getattr(schema, "curve", None)):
            message = f"scheduler {name!r} offers no torch-free curve, so it cannot be evaluated"
            raise ConfigError([ConfigIssue(where, message)])
        return schema

    def curve(self, spec: Any, where: str) -> tuple[Callable[[int], float], dict[str, Any], type]:
        name, given = _spec_parts(spec, where)
        schema = self.schema(name, where)
        arguments = validated_arguments(schema, given, owner=where)
        counter = iter(range(1_000_000))

        def child_curve(child: Any) -> Callable[[int], float]:
            return self.curve(child, f"{where}.{name}[{next(counter)}]")[0]

        curve: Callable[[int], float] = schema.curve(arguments, child_curve)  # type: ignore[attr-defined]
        return curve, arguments, schema


def _tags_of(param_group_tags: Any) -> list[str | None]:
    if param_group_tags is None:
        return ["*"]
    if isinstance(param_group_tags, str):
        return [param_group_tags]
    return list(param_group_tags)


def _natural_length(curve: Callable[[int], float]) -> int | None:
    length = getattr(curve, "length", None)
    return length if isinstance(length, int) and length > 0 else None


def schedule_curves(
    specs: Sequence[Mapping[str, Any]],
    steps: int | Iterable[int] | None = None,
    registry: Registry | None = None,
) -> list[ScheduleCurve]:
    """Evaluate schedulers written as ``{Name: {arguments}}`` without torch.

    :param specs: the schedulers, as in a run file's ``schedulers:`` list.
    :param steps: a number of steps (values at ``0 .. steps - 1``) or the steps themselves;
        ``None``: the longest natural length among the schedules, else :data:`DEFAULT_STEPS`.
    :param registry: where names resolve (default: the process-wide registry).
    :returns: one :class:`ScheduleCurve` per scheduler and targeted tag, in order.
    :raises ConfigError: for bad arguments or a scheduler without a torch-free curve.
    """
    if registry is None:
        from plugtrain.plugins import get_registry

        registry = get_registry()
    evaluator = _Evaluator(registry)
    built = []
    for index, spec in enumerate(specs):
        name, _ = _spec_parts(spec, f"schedulers[{index}]")
        curve, arguments, schema = evaluator.curve(spec, f"schedulers[{index}]")
        key = getattr(schema, "schedule_key", "lr")
        built.append((index, name, key, arguments.get("param_group_tags"), curve))
    if steps is None:
        lengths = [n for *_, curve in built if (n := _natural_length(curve)) is not None]
        steps = max(lengths, default=DEFAULT_STEPS)
    points = tuple(range(steps)) if isinstance(steps, int) else tuple(steps)
    found: list[ScheduleCurve] = []
    for index, name, key, tags, curve in built:
        values = tuple(float(curve(e)) for e in points)
        found.extend(ScheduleCurve(index, name, key, tag, points, values) for tag in _tags_of(tags))
    return found


def plot_schedules(
    specs: Sequence[Mapping[str, Any]],
    path: str | Path,
    steps: int | Iterable[int] | None = None,
    registry: Registry | None = None,
) -> Path:
    """Draw the schedules into an image: learning rate and weight decay on separate axes.

    One line per scheduler and targeted tag, step on x. The format follows ``path``'s suffix
    (``.png``, ``.svg``, ``.pdf``).

    :returns: the path written.
    :raises ImportError: when matplotlib is not installed (it is an optional extra).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        message = "plotting schedules needs matplotlib: pip install matplotlib"
        raise ImportError(message) from exc
    curves = schedule_curves(specs, steps, registry)
    keys = [k for k in _AXIS_TITLES if any(c.key == k for c in curves)]
    keys += sorted({c.key for c in curves} - set(keys))
    keys = keys or ["lr"]
    figure = Figure(figsize=(8, 3 * len(keys)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    for axis, key in zip(axes, keys, strict=True):
        for curve in (c for c in curves if c.key == key):
            axis.plot(curve.steps, curve.values, label=curve.label)
        axis.set_ylabel(_AXIS_TITLES.get(key, key))
        axis.grid(visible=True, alpha=0.3)
        if axis.lines:
            axis.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    target = Path(path)
    figure.savefig(target)
    return target
