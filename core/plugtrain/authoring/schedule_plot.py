"""Schedules as numbers and pictures: what ``plugtrain plot`` draws.

A scheduler whose schema offers a closed form (``schedule_key`` and a staticmethod
``curve(arguments, child_curve)``, see :class:`plugtrain.protocols.CurveSchema`) is evaluated
without torch, through :func:`plugtrain.curve.closed_form`. Any other scheduler (a plain torch
``LRScheduler``, a stepped third-party one, a wrapper holding one) is built on a throw-away
optimizer and stepped (:mod:`plugtrain.train.assembly.schedule_values`, which imports torch);
its legend says so. matplotlib is needed only by :func:`plot_schedules` and imported there.

Sparsity groups (``trainer.init.sparsity``) are drawn beside them: each group's target
``sparsity`` and, for SET and RigL, its ``drop_fraction``, from the closed forms its algorithm's
schema gives (``curves(arguments)``, see :class:`plugtrain.sparsity_schema.SparsitySchema`), so a
third party's algorithm is drawn the same way.

:func:`plot_trainer_schedules` draws one trainer of a run file: ``plugtrain plot`` calls it for
each trainer, and ``plugtrain fit`` after each trainer's fit (into ``schedule.png``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from plugtrain.bases.curve import closed_form, spec_parts
from plugtrain.errors import ConfigError, ConfigIssue, MissingDependencyError, UnknownNameError
from plugtrain.registry.schema import arg_infos, validated_arguments

if TYPE_CHECKING:
    from plugtrain.config.plan import SparsityGroupSpec, TrainerPlan
    from plugtrain.registry.components import Registry

__all__ = [
    "DEFAULT_STEPS",
    "MATPLOTLIB_MISSING",
    "STEPPED_NOTE",
    "ScheduleCurve",
    "plot_schedules",
    "plot_trainer_schedules",
    "schedule_curves",
]

MATPLOTLIB_MISSING = (
    "drawing schedules needs matplotlib, which is not installed: "
    "pip install 'plugtrain[plot]' (the train extra includes it too)"
)
"""The error (and ``fit``'s warning) when matplotlib is missing."""

DEFAULT_STEPS = 1000
"""Steps drawn when neither the caller nor any schedule says how long it is."""

STEPPED_NOTE = "stepped: no closed form"
"""What the legend adds to a schedule found by stepping the scheduler."""

_AXIS_TITLES = {
    "lr": "learning rate",
    "weight_decay": "weight decay",
    "sparsity": "target sparsity",
    "drop_fraction": "drop fraction",
}


@attrs.frozen
class ScheduleCurve:
    """The values one scheduler writes into the groups carrying one tag.

    :param index: position of the scheduler in the list given (of the group, for sparsity).
    :param name: the scheduler's name as written (for sparsity: ``"RigL (sparsity[0])"``).
    :param key: the param-group key it schedules, ``"lr"`` or ``"weight_decay"``; for a
        sparsity group the schedule argument (``"sparsity"``, ``"drop_fraction"``).
    :param tag: the targeted tag (``None``: untagged groups), or ``"*"`` for every group.
    :param steps: the steps evaluated.
    :param values: the value at each of ``steps``.
    :param stepped: found by stepping the scheduler on a throw-away optimizer (it has no closed
        form), rather than from its closed form.
    """

    index: int
    name: str
    key: str
    tag: str | None
    steps: tuple[int, ...]
    values: tuple[float, ...]
    stepped: bool = False

    @property
    def label(self) -> str:
        """``"CosineDecayWD [bias_params]"``, ``"SequentialLR"`` for every group."""
        label = (
            self.name
            if self.tag == "*"
            else (f"{self.name} [{'untagged' if self.tag is None else self.tag}]")
        )
        return f"{label} ({STEPPED_NOTE})" if self.stepped else label


def _tags_of(param_group_tags: Any) -> list[str | None]:
    if param_group_tags is None:
        return ["*"]
    if isinstance(param_group_tags, str):
        return [param_group_tags]
    return list(param_group_tags)


def _natural_length(length: Any) -> int | None:
    return length if isinstance(length, int) and length > 0 else None


def _initial_values(registry: Registry, optimizer: Any) -> dict[str, float]:
    """``lr`` and ``weight_decay`` the optimizer ``{Name: {arguments}}`` starts the groups at.

    Read as written (under any alias) or as the schema's default; not validated again: the
    run file was validated before anything is plotted, and a cross-check may be costly.
    """
    if not isinstance(optimizer, Mapping) or len(optimizer) != 1:
        return {}
    ((name, given),) = optimizer.items()
    given = given if isinstance(given, Mapping) else {}
    try:
        infos = {
            info.name: info for info in arg_infos(registry.lookup("optimizer", name).schema_class)
        }
    except UnknownNameError:
        return {}
    values: dict[str, float] = {}
    for key in ("lr", "weight_decay"):
        info = infos.get(key)
        names = (key, *info.aliases) if info is not None else (key,)
        value = next((given[n] for n in names if n in given), None)
        if value is None and info is not None and not info.required:
            value = info.default
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[key] = float(value)
    return values


class _Stepped:
    """A scheduler without a closed form, stepped on a throw-away optimizer (imports torch)."""

    def __init__(
        self, registry: Registry, spec: Any, where: str, initial: Mapping[str, float]
    ) -> None:
        from plugtrain.train.assembly import SteppedSchedule

        name, given = spec_parts(spec, where)
        schema = registry.lookup("scheduler", name).schema_class
        arguments = validated_arguments(schema, given, owner=where)
        self.tags = _tags_of(arguments.get("param_group_tags"))
        self.schedule = SteppedSchedule(registry, {name: dict(given)}, self.tags, initial)
        self.key = self.schedule.key
        self.length = _natural_length(self.schedule.length)


def sparsity_curves(
    groups: Sequence[SparsityGroupSpec], registry: Registry
) -> list[tuple[int, str, str, Any]]:
    """``(index, name, argument, curve)`` of each schedule argument of each sparsity group.

    Each group's algorithm schema gives its closed forms through ``curves(arguments)``; a
    schema without one is skipped (nothing to draw without building the algorithm).

    :raises ConfigError: for bad arguments.
    """
    found: list[tuple[int, str, str, Any]] = []
    for index, group in enumerate(groups):
        schema = registry.lookup("sparsity", group.algorithm).schema_class
        curves_of = getattr(schema, "curves", None)
        if not callable(curves_of):
            continue
        arguments = validated_arguments(schema, dict(group.arguments), owner=group.path)
        where = group.path.rsplit(".", 1)[-1] or "sparsity"
        name = f"{group.algorithm} ({where})"
        found.extend((index, name, key, curve) for key, curve in curves_of(arguments).items())
    return found


def schedule_curves(
    specs: Sequence[Mapping[str, Any]],
    steps: int | Iterable[int] | None = None,
    registry: Registry | None = None,
    optimizer: Mapping[str, Any] | None = None,
    sparsity: Sequence[SparsityGroupSpec] = (),
) -> list[ScheduleCurve]:
    """Evaluate schedulers written as ``{Name: {arguments}}``.

    Closed forms are evaluated without torch; a scheduler without one is stepped on a
    throw-away optimizer (torch imported then).

    :param specs: the schedulers, as in a run file's ``schedulers:`` list.
    :param steps: a number of steps (values at ``0 .. steps - 1``) or the steps themselves;
        ``None``: the longest natural length among the schedules, else :data:`DEFAULT_STEPS`.
    :param registry: where names resolve (default: the process-wide registry).
    :param optimizer: the run's ``{Name: {arguments}}`` optimizer, whose ``lr`` and
        ``weight_decay`` a stepped scheduler starts from (default 1.0 and 0).
    :param sparsity: the trainer's sparsity groups (``TrainerPlan.sparsity``): their target
        sparsity and drop fraction are evaluated too, after the schedulers.
    :returns: one :class:`ScheduleCurve` per scheduler and targeted tag, in order, then one
        per sparsity group and schedule argument.
    :raises ConfigError: for bad arguments.
    """
    if registry is None:
        from plugtrain.discovery.loading import get_registry

        registry = get_registry()
    initial = _initial_values(registry, optimizer)
    built: list[tuple[int, str, Any]] = []
    for index, spec in enumerate(specs):
        where = f"schedulers[{index}]"
        name, _ = spec_parts(spec, where)
        try:
            built.append((index, name, closed_form(registry, spec, where)))
        except NotImplementedError:
            built.append((index, name, _Stepped(registry, spec, where, initial)))
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError([ConfigIssue(where, str(exc))]) from exc
    sparse = sparsity_curves(sparsity, registry)
    if steps is None:
        lengths = [_length_of(item) for *_, item in built]
        steps = max((n for n in lengths if n is not None), default=DEFAULT_STEPS)
    points = tuple(range(steps)) if isinstance(steps, int) else tuple(steps)
    found: list[ScheduleCurve] = []
    for index, name, item in built:
        if isinstance(item, _Stepped):
            columns = item.schedule.sample(points, item.tags)
            found.extend(
                ScheduleCurve(index, name, item.key, tag, points, values, stepped=True)
                for tag, values in zip(item.tags, columns, strict=True)
            )
            continue
        values = tuple(float(item.curve.at(e)) for e in points)
        tags = _tags_of(item.arguments.get("param_group_tags"))
        found.extend(ScheduleCurve(index, name, item.key, tag, points, values) for tag in tags)
    for index, name, key, curve in sparse:
        values = tuple(float(curve.at(e)) for e in points)
        found.append(ScheduleCurve(index, name, key, "*", points, values))
    return found


def _length_of(item: Any) -> int | None:
    if isinstance(item, _Stepped):
        return item.length
    return _natural_length(getattr(item.curve, "length", None))


def plot_schedules(
    specs: Sequence[Mapping[str, Any]],
    path: str | Path,
    steps: int | Iterable[int] | None = None,
    registry: Registry | None = None,
    optimizer: Mapping[str, Any] | None = None,
    sparsity: Sequence[SparsityGroupSpec] = (),
) -> Path:
    """Draw the schedules into an image: learning rate and weight decay on separate axes.

    Sparsity groups add a target-sparsity axis (and a drop-fraction axis for SET and RigL).

    One line per scheduler and targeted tag, step on x; a schedule found by stepping (no closed
    form) says so in the legend. The format follows ``path``'s suffix (``.png``, ``.svg``,
    ``.pdf``). Arguments as for :func:`schedule_curves`.

    :returns: the path written.
    :raises MissingDependencyError: (an ``ImportError``) when matplotlib is not installed; the
        message names the extras that bring it.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError(MATPLOTLIB_MISSING) from exc
    curves = schedule_curves(specs, steps, registry, optimizer, sparsity)
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


def plot_trainer_schedules(
    trainer: TrainerPlan,
    path: str | Path,
    steps: int | Iterable[int] | None = None,
    registry: Registry | None = None,
) -> Path | None:
    """Draw the schedules of one trainer of a run file: its schedulers and sparsity groups.

    What ``plugtrain plot`` draws for each trainer and ``plugtrain fit`` after each trainer's fit.
    A stepped scheduler (no closed form) starts from the learning rate of the trainer's optimizer.

    :param trainer: the trainer's validated plan.
    :param path: the image to write (as for :func:`plot_schedules`).
    :param steps: steps to draw, as for :func:`schedule_curves`; ``None``: their natural length.
    :param registry: the registry the run file was validated with (default: the process's).
    :returns: the path written, or ``None`` when the trainer has neither schedulers nor sparsity
        (nothing is written, and matplotlib is not needed).
    :raises MissingDependencyError: when matplotlib is not installed (:data:`MATPLOTLIB_MISSING`).
    """
    if not trainer.schedulers and not trainer.sparsity:
        return None
    specs = [spec.to_mapping() for spec in trainer.schedulers]
    optimizer = trainer.optimizer.spec.to_mapping() if trainer.optimizer else None
    return plot_schedules(
        specs, path, steps, registry, optimizer=optimizer, sparsity=trainer.sparsity
    )
