"""The base of sparsity algorithm schemas, for built-in and third-party algorithms (no torch).

A sparsity algorithm's schema is an ``attrs.frozen`` class deriving from :class:`SparsitySchema`
whose fields are its constructor arguments (the keys of one ``trainer.init.sparsity`` group
besides ``algorithm`` and ``param_filter``, which the Trainer handles)::

    @attrs.frozen
    class MyPruningArgs(SparsitySchema):
        \"\"\"Prune to a schedule, regrowing nothing.\"\"\"

        sparsity: Any = sparsity_arg()
        init_method: Any = init_method_arg()
        update: Any = update_arg()

        update_argument: ClassVar[str | None] = "update"

A schedule argument's annotation says what it takes (plugtrain-sparsity's: ``float |
list[float] | dict[str, Any] | HyperParameterSchedule | Callable[[int], float]``); the schedule
itself (its ``type`` and arguments) is checked by ``cross_check``. The helpers
(:func:`sparsity_arg`, :func:`init_method_arg`, :func:`update_arg`, :func:`drop_fraction_arg`)
declare the arguments Model Zoo's algorithms share, with their aliases and help.
:meth:`SparsitySchema.cross_check` checks every schedule argument with
:func:`plugtrain.hyperparams.make_schedule`, the update argument with
:func:`~plugtrain.hyperparams.make_update_schedule` and ``init_method``, then the schema's own
:meth:`~SparsitySchema.rules`; :meth:`SparsitySchema.curves` gives the closed forms that
``plugtrain plot`` draws.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar

from plugtrain.bases.curve import Curve
from plugtrain.bases.hyperparams import (
    HyperParameterError,
    UpdateSchedule,
    make_schedule,
    make_update_schedule,
)
from plugtrain.bases.update_schedule import FreqUpdateSchedule, ListUpdateSchedule
from plugtrain.registry.schema import Problem, about, arg

__all__ = [
    "INIT_METHODS",
    "SparsitySchema",
    "drop_fraction_arg",
    "init_method_arg",
    "init_method_problem",
    "sparsity_arg",
    "update_arg",
]

INIT_METHODS = ("random", "topk", "from_zeros", "checkerboard")
"""The built-in mask initialisations (exact case)."""

INIT_METHOD_SIGNATURE = "(param, sparsity, score_shaper=None, device=None) -> bool tensor"
"""What a callable ``init_method`` is called with (Python only)."""


def sparsity_arg(help: str = "") -> Any:  # noqa: A002 - as plugtrain.schema.arg
    """The required ``sparsity`` argument (alias ``schedule``): the target fraction of zeros."""
    return arg(
        help=help
        or "target fraction of zeros per parameter: a number, a list (cycling) or a schedule "
        "{type: constant|linear|exp|power|cosine|cycling, ...}",
        aliases=("schedule",),
    )


def init_method_arg() -> Any:
    """``init_method``: how masks start (``random`` by default)."""
    return arg(
        "random",
        help="mask initialisation: random, topk, from_zeros or checkerboard (a callable from "
        "Python)",
    )


def update_arg() -> Any:
    """``update``: which steps may change the mask (every step by default)."""
    return arg(
        None,
        help="update steps: {freq: N, start: 0, stop: null} or {steps: [...]}; null: every step",
    )


def drop_fraction_arg() -> Any:
    """``drop_fraction``: fraction of the kept weights dropped at each update (``0.3``)."""
    return arg(
        0.3,
        help="fraction of the kept weights dropped at each update step: a number, a list or a "
        "schedule mapping",
    )


def init_method_problem(value: Any) -> str | None:
    """Why ``value`` is not an ``init_method``, or ``None``."""
    if callable(value) and not isinstance(value, str):
        return None
    if isinstance(value, str) and value in INIT_METHODS:
        return None
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return (
        f"Unknown `init_method`: {shown}. Valid options are one of the built-in "
        f"{list(INIT_METHODS)} or a function with signature {INIT_METHOD_SIGNATURE}."
    )


class SparsitySchema:
    """Base of sparsity algorithm schemas: checks of schedules, ``update``, ``init_method``.

    Subclasses are ``attrs.frozen`` classes; they set :attr:`schedules` and
    :attr:`update_argument` when they take more or other schedule arguments, and may define
    :meth:`rules` for their own rules.
    """

    schedules: ClassVar[tuple[str, ...]] = ("sparsity",)
    """The arguments that are hyperparameter schedules (checked with ``make_schedule``)."""

    update_argument: ClassVar[str | None] = None
    """The argument that is an update schedule (``"update"``), if the algorithm takes one."""

    @staticmethod
    def rules(arguments: Mapping[str, Any]) -> Iterable[str | Problem]:
        """Messages for the algorithm's own rules (arguments already type-checked)."""
        return ()

    @classmethod
    def cross_check(cls, arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Every schedule argument, the update argument, ``init_method``, then :meth:`rules`."""
        for name in cls.schedules:
            value = arguments.get(name)
            if value is None:
                continue
            try:
                make_schedule(value)
            except HyperParameterError as exc:
                yield about(name, str(exc))
        if cls.update_argument is not None:
            try:
                make_update_schedule(arguments.get(cls.update_argument))
            except HyperParameterError as exc:
                yield about(cls.update_argument, str(exc))
        if "init_method" in arguments:
            problem = init_method_problem(arguments["init_method"])
            if problem is not None:
                yield about("init_method", problem)
        yield from cls.rules(arguments)

    @classmethod
    def curves(cls, arguments: Mapping[str, Any]) -> dict[str, Curve]:
        """The closed form of each schedule argument, by name, for ``plugtrain plot``.

        ``sparsity`` is clamped to [0, 1] as the algorithms use it; a cycling ``sparsity``
        moves once before step 1 when step 0 is an update step (training starts sparse), and
        is drawn as the level the masks were last set to (what ``LogSparsity`` logs as the
        target), since it has moved on already after each update.

        :param arguments: validated arguments (aliases renamed, defaults filled in).
        """
        update = None
        if cls.update_argument is not None:
            update = make_update_schedule(arguments.get(cls.update_argument))
        starts_sparse = update is None or update(0)
        found: dict[str, Curve] = {}
        for name in cls.schedules:
            value = arguments.get(name)
            if value is None:
                continue
            schedule = make_schedule(value)
            advances = 1 if name == "sparsity" and starts_sparse else 0
            curve = schedule.curve(update, advances=advances)
            if name == "sparsity":
                if schedule.state_dict():
                    curve = _applied(curve, update or make_update_schedule(None), starts_sparse)
                curve = _clamped(curve)
            elif update is not None:
                curve = _until_last_update(curve, update)
            found[name] = curve
        return found


def _applied(curve: Curve, update: UpdateSchedule, starts_sparse: bool) -> Curve:
    """The value at the last update step (at initialisation before the first one)."""
    at = curve.at

    def level(step: int) -> float:
        last = update.last_update(step)
        if last is not None:
            return at(last)
        return at(0) if starts_sparse else at(step)

    return Curve(level, curve.length)


def _final_update(update: UpdateSchedule) -> int | None:
    """The last step that updates the masks; ``None`` when updates never stop."""
    if isinstance(update, FreqUpdateSchedule) and update.stop is not None:
        return update.last_update(update.stop)
    if isinstance(update, ListUpdateSchedule):
        return update.steps[-1] if update.steps else 0
    return None


def _until_last_update(curve: Curve, update: UpdateSchedule) -> Curve:
    """``curve`` up to the last update step, NaN after it (a value no update uses is not drawn).

    A drop fraction only acts at update steps; after the last one it has no meaning.
    """
    final = _final_update(update)
    if final is None:
        return curve
    at = curve.at
    return Curve(lambda step: at(step) if step <= final else math.nan, curve.length)


def _clamped(curve: Curve) -> Curve:
    at = curve.at
    return Curve(lambda step: min(1.0, max(0.0, at(step))), curve.length)
