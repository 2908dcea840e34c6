"""The scheduler base that built-in and third-party schedulers share, and the protocol readers.

A scheduler written against this module is a schema (a :class:`ScheduleSchema` attrs class: its
arguments, its param-group key and its closed form) and a class deriving from
:class:`Scheduler` that names it::

    @attrs.frozen
    class WarmupArgs(ScheduleSchema):
        peak: float = arg(help="value reached after warmup_steps", ge=0)
        warmup_steps: int = arg(help="steps of the ramp", gt=0)
        param_group_tags: ParamGroupTags = tags_arg()

        @staticmethod
        def curve(arguments, child_curve):
            peak, steps = arguments["peak"], arguments["warmup_steps"]
            return Curve(lambda e: peak * min(e, steps) / steps, length=steps)

    class LinearWarmupLR(Scheduler):
        schema = WarmupArgs

The constructor signature is derived from the schema, arguments are validated as in a run file,
``param_group_tags`` selects the groups by the rules of :mod:`plugtrain.tags`,
``step()`` writes ``curve(e)`` into the targeted groups, and the state round-trips exactly and
loads with ``weights_only=True``.

The readers (:func:`scheduler_key`, :func:`scheduler_groups`, :func:`scheduler_length`,
:func:`scheduler_curve`, :func:`last_values`) are how the Trainer and the wrappers read any
scheduler that meets :class:`plugtrain.protocols.Scheduler`, including a plain
``torch.optim.lr_scheduler.LRScheduler`` (``"lr"`` of every group, no length, no closed form).

This module does not import torch: an optimizer is recognised through ``sys.modules``, since no
object can be a ``torch.optim.Optimizer`` before torch is imported.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, TypeVar

from plugtrain.bases.curve import Curve, as_curve
from plugtrain.bases.tags import select_param_groups, tag_problems
from plugtrain.registry.schema import (
    Problem,
    about,
    arg,
    bind_arguments,
    constructor_signature,
    validated_arguments,
)

_log = logging.getLogger("plugtrain")

T = TypeVar("T")

__all__ = [
    "EXCLUDED_FROM_DECAY",
    "ChildCurve",
    "ParamGroupTags",
    "ScheduleSchema",
    "Scheduler",
    "Show",
    "build_nested",
    "excluded_from_decay",
    "is_scheduler",
    "keep_group_values",
    "last_values",
    "scheduler_curve",
    "scheduler_groups",
    "scheduler_key",
    "scheduler_length",
    "tags_arg",
]

SCHEDULED_KEYS = ("lr", "weight_decay")
"""The param-group keys schedulers write."""

EXCLUDED_FROM_DECAY = "weight_decay_excluded"
"""The param-group key marking a group excluded from weight decay.

The Trainer's param groups put bias and normalisation parameters in a ``weight_decay: 0`` twin
of their group (``exclude_from_weight_decay``, on by default) and mark it ``True`` here. A
weight-decay scheduler leaves such groups alone (:func:`excluded_from_decay`); to schedule their
decay too, turn ``exclude_from_weight_decay`` off.
"""


def excluded_from_decay(group: Mapping[str, Any]) -> bool:
    """Whether ``group`` is a zero-decay group a weight-decay scheduler must leave alone."""
    return bool(group.get(EXCLUDED_FROM_DECAY))


ChildCurve = Callable[[Any], Curve]
"""Turns a nested scheduler (``{Name: {arguments}}`` or a built scheduler) into its curve."""

_S = TypeVar("_S")

Show = Callable[[str], str]
"""Maps a canonical argument name to the name the user wrote it under (for messages)."""


ParamGroupTags = str | list[str | None] | set[str | None] | None
"""The type of ``param_group_tags``: ``param_group_tags: ParamGroupTags = tags_arg()``.

In a :class:`ScheduleSchema` the argument is shown (``plugtrain show``, the reference) as the
union itself, as though it were written out.
"""


def tags_arg() -> Any:
    """The ``param_group_tags`` argument every scheduler takes (rules: :mod:`plugtrain.tags`).

    Annotate it with :data:`ParamGroupTags`.
    """
    return arg(
        None,
        help="only update param groups carrying one of these tags (None: every group; "
        "[None]: the untagged groups)",
    )


def _written_out_tags(schema: type) -> None:
    """Put :data:`ParamGroupTags` itself where ``schema`` annotates ``param_group_tags`` with it.

    Under ``from __future__ import annotations`` the annotation is the text
    ``"ParamGroupTags"``, and an argument's type is shown as written; the union in its place is
    shown as the union (a weight-decay twin's resolved annotations read the same).
    """
    module = sys.modules.get(schema.__module__)
    if (
        inspect.get_annotations(schema).get("param_group_tags") == "ParamGroupTags"
        and getattr(module, "ParamGroupTags", None) is ParamGroupTags
    ):
        schema.__annotations__["param_group_tags"] = ParamGroupTags  # its own (just read)


def _same_name(name: str) -> str:
    return name


class ScheduleSchema:
    """Base of scheduler schemas: ``schedule_key``, the closed form ``curve`` and ``rules``.

    Subclasses are ``attrs.frozen`` classes whose fields are the arguments (built with
    :func:`plugtrain.schema.arg`, ``param_group_tags: ParamGroupTags`` with :func:`tags_arg`).
    """

    schedule_key: ClassVar[str] = "lr"
    """The param-group key the scheduler writes: ``"lr"`` or ``"weight_decay"``."""

    nestable: ClassVar[bool] = True
    """Whether a wrapper (``SequentialLR`` ...) may take it as a child (``ScalePerParamLR``: no)."""
    applies_group_factors: ClassVar[bool] = False
    """Whether it is a wrapper that multiplies its child's value by each group's factor.

    Model Zoo's rule for param groups with an ``adjust_learning_rate`` factor (muP): an LR
    scheduler's value is multiplied by each group's factor. When the optimizer's groups carry
    factors, the Trainer wraps an LR scheduler that does not apply them in the installed
    scheduler whose schema declares this (``ScalePerParamLR`` of ``plugtrain-schedulers``),
    called as ``Wrapper(optimizer, scheduler=child)``.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _written_out_tags(cls)

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """The value-of-step function for validated ``arguments``.

        :param arguments: every argument, aliases renamed and defaults filled in.
        :param child_curve: gives the curve of a nested scheduler argument; it raises
            :class:`NotImplementedError` when that child has no closed form.
        :raises NotImplementedError: the schedule has no closed form (the default).
        """
        raise NotImplementedError

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[str | Problem]:
        """Messages for broken rules that involve several arguments."""
        return ()

    @classmethod
    def cross_check(cls, arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Every rule across arguments, with ``param_group_tags`` checked first."""
        for message in tag_problems(arguments.get("param_group_tags")):
            yield about("param_group_tags", message)
        yield from cls.rules(arguments, _same_name)


def _is_optimizer(candidate: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(candidate, torch.optim.Optimizer)


class Scheduler:
    """Base of every scheduler: writes its value into the targeted groups' ``param_key``.

    ``e`` counts ``step()`` calls since construction; construction writes the value at
    ``e = 0``. The value never depends on a group's previous value.

    :ivar param_key: ``"lr"`` or ``"weight_decay"`` (the schema's ``schedule_key``).
    :ivar group_indices: indices of the targeted groups in ``optimizer.param_groups``.
    :ivar curve: the closed form, a :class:`~plugtrain.curve.Curve` (``None`` for a wrapper
        whose children have none).
    :ivar last_step: ``e``.
    """

    schema: ClassVar[type[ScheduleSchema]]
    param_key: ClassVar[str] = "lr"
    takes_optimizer: ClassVar[bool] = True
    takes_context: ClassVar[bool] = True
    """Whether the constructor takes the optimizer first (the kind's context argument); a
    subclass says so with ``takes_optimizer`` (cstorch's ``ChainedScheduler`` does not)."""
    __signature__: ClassVar[inspect.Signature]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.takes_context = cls.takes_optimizer
        if "schema" in cls.__dict__:
            context = ("optimizer",) if cls.takes_optimizer else ()
            cls.__signature__ = constructor_signature(cls.schema, context)
            if "param_key" not in cls.__dict__:
                cls.param_key = getattr(cls.schema, "schedule_key", cls.param_key)

    def __new__(cls: type[_S], *args: Any, **kwargs: Any) -> _S:
        """An instance of ``cls`` that is also a ``torch.optim.lr_scheduler.LRScheduler``.

        Trainers that accept only torch's schedulers (Lightning checks ``isinstance``) take ours
        as they are. Torch is imported by then (the optimizer argument needs it); this module
        still never imports it, so listing and validation stay torch-free.
        """
        instance: _S = object.__new__(_with_torch_base(cls))
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        arguments = self._bind(args, kwargs)
        name = type(self).__name__
        self.arguments: dict[str, Any] = validated_arguments(self.schema, arguments, owner=name)
        self.optimizer = self._optimizer
        self.param_group_tags = self.arguments.get("param_group_tags")
        selected = select_param_groups(self.optimizer.param_groups, self.param_group_tags)
        groups = self.optimizer.param_groups
        skip = self.param_key == "weight_decay"
        self.excluded_groups = [i for i in selected if skip and excluded_from_decay(groups[i])]
        """The selected groups left alone: zero-decay groups, for a weight-decay scheduler."""
        self.group_indices = [i for i in selected if i not in self.excluded_groups]
        self.curve: Curve | None = as_curve(self._build_curve(), lambda: _owner(self))
        self._factors = self._group_factors()
        # One value for every group: step() writes curve.at(e) directly, the fast path.
        self._at = self.curve.at if self.curve is not None and self._factors is None else None
        self._last_value: Any = None
        self._last_values: list[Any] = []
        self.last_step = 0
        self._apply()

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by name; takes the leading optimizer into ``self._optimizer``.

        :raises TypeError: without an optimizer, or for too many positional arguments.
        """
        arguments = self._bind_names(args, kwargs)
        self._optimizer = arguments.pop("optimizer", None)
        if not _is_optimizer(self._optimizer):
            message = (
                f"{type(self).__name__} needs a torch.optim.Optimizer as its first argument, "
                f"got {type(self._optimizer).__name__}"
            )
            raise TypeError(message)
        return arguments

    def _bind_names(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Arguments by name, positional ones matched to the signature's order.

        Unknown keywords are kept for the schema to report, with suggestions.
        """
        return bind_arguments(type(self).__signature__, args, kwargs)

    def _build_curve(self) -> Curve | None:
        """The closed form; wrappers override this to build their children first."""
        return self.schema.curve(self.arguments, _no_children)

    def _group_factors(self) -> list[float] | None:
        """Per-group multipliers of the value (``None``: all 1)."""
        return None

    def _uncurved_values(self, step: int) -> list[Any]:
        """The values at ``step``, one per targeted group, for a scheduler without a curve."""
        message = f"{type(self).__name__} has no closed form and no other source of values"
        raise NotImplementedError(message)

    def _current_values(self) -> list[Any]:
        """The values of step ``last_step``, one per targeted group."""
        if self.curve is None:
            values = self._uncurved_values(self.last_step)
        else:
            values = [self.curve.at(self.last_step)] * len(self.group_indices)
        if self._factors is None:
            return values
        return [value * factor for value, factor in zip(values, self._factors, strict=True)]

    def _apply(self) -> None:
        groups = self.optimizer.param_groups
        key = self.param_key
        if self._at is not None:
            value = self._last_value = self._at(self.last_step)
            for i in self.group_indices:
                groups[i][key] = value
            return
        values = self._current_values()
        self._last_values = values
        for i, value in zip(self.group_indices, values, strict=True):
            groups[i][key] = value

    def step(self) -> None:
        """Advance one step and write the new value into the targeted groups."""
        e = self.last_step = self.last_step + 1
        at = self._at
        if at is None:
            self._apply()
            return
        # _apply inlined: this runs every optimizer step (bench/schedulers.py)
        value = self._last_value = at(e)
        groups = self.optimizer.param_groups
        key = self.param_key
        for i in self.group_indices:
            groups[i][key] = value

    def value(self, step: int) -> float:
        """The scheduled value at ``step`` (before any per-group factor).

        :raises TypeError: when the scheduler has no closed form.
        """
        if self.curve is None:
            message = f"{type(self).__name__} has no closed form; step it to get its values"
            raise TypeError(message)
        return self.curve.at(step)

    @property
    def length(self) -> int | None:
        """The natural number of steps (``total_iters``), or ``None``."""
        return None if self.curve is None else self.curve.length

    def get_last_value(self) -> list[float]:
        """The values last written, one per targeted group."""
        if self._at is not None:
            return [self._last_value] * len(self.group_indices)
        return list(self._last_values)

    def get_last_lr(self) -> list[float]:
        """Torch's name for :meth:`get_last_value`."""
        return self.get_last_value()

    @property
    def last_epoch(self) -> int:
        """Torch's name for :attr:`last_step`."""
        return self.last_step

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The targeted param groups."""
        groups = self.optimizer.param_groups
        return [groups[i] for i in self.group_indices]

    def state_dict(self) -> dict[str, Any]:
        """The position in the schedule; everything else is rebuilt from the arguments."""
        return {"last_step": self.last_step, "group_indices": list(self.group_indices)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the position and write its value into the groups at once.

        :raises ValueError: when the state was saved by a scheduler of other groups.
        """
        saved = state.get("group_indices")
        if saved is not None and self._adopt_old_groups(list(saved)):
            saved = self.group_indices
        if saved is not None and list(saved) != list(self.group_indices):
            message = (
                f"{type(self).__name__} state targets param groups {list(saved)}, "
                f"this scheduler targets {self.group_indices}"
            )
            raise ValueError(message)
        self._restore(state)
        self.last_step = int(state["last_step"])
        self._apply()

    def _adopt_old_groups(self, saved: list[int]) -> bool:
        """Keep decaying the zero-decay groups a checkpoint written before API 1.1 decayed.

        Before plugin API 1.1 a weight-decay scheduler wrote its zero-decay groups too; a run
        resumed from such a checkpoint continues as it started, with a warning.
        """
        extra = set(saved) - set(self.group_indices)
        if not extra or not extra <= set(self.excluded_groups):
            return False
        if set(self.group_indices) - set(saved):
            return False
        _log.warning(
            "%s: the checkpoint's scheduler also decays the zero-decay param groups %s (as "
            "weight-decay schedulers did before plugin API 1.1); the resumed run keeps doing so",
            type(self).__name__,
            sorted(extra),
        )
        self.group_indices = list(saved)
        self.excluded_groups = [i for i in self.excluded_groups if i not in extra]
        self._factors = self._group_factors()
        self._at = self.curve.at if self.curve is not None and self._factors is None else None
        return True

    def _restore(self, state: Mapping[str, Any]) -> None:
        """Restore what a subclass added to :meth:`state_dict` (before the value is written)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_step={self.last_step}, groups={self.group_indices})"


_DERIVED = "_plugtrain_with_torch_base"
"""Where a class keeps its derived class (in its own ``__dict__``: it lives as long as it)."""


def _with_torch_base(cls: type[_S]) -> type[_S]:
    """``cls`` with torch's ``LRScheduler`` as a further base, made once per class.

    The derived class keeps the name, module and docstring of ``cls`` and adds nothing: every
    method of :class:`Scheduler` comes first in its method order. ``cls`` itself is returned
    while torch is not imported, or when it already derives from ``LRScheduler``.
    """
    lr_scheduler = sys.modules.get("torch.optim.lr_scheduler")
    if lr_scheduler is None or issubclass(cls, lr_scheduler.LRScheduler):
        return cls
    derived: type[_S] | None = cls.__dict__.get(_DERIVED)
    if derived is None:
        namespace = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        }
        derived = type(cls.__name__, (cls, lr_scheduler.LRScheduler), namespace)
        setattr(cls, _DERIVED, derived)
    return derived


def _no_children(spec: Any) -> Curve:
    message = f"this scheduler takes no nested scheduler, got {spec!r}"
    raise TypeError(message)


# -- reading any scheduler through the protocol ----------------------------------------------


def is_scheduler(candidate: Any) -> bool:
    """Whether ``candidate`` is a built scheduler (ours, a third party's or torch's)."""
    return hasattr(candidate, "optimizer") and all(
        callable(getattr(candidate, name, None))
        for name in ("step", "state_dict", "load_state_dict")
    )


def scheduler_key(scheduler: Any) -> str:
    """The param-group key ``scheduler`` writes: its ``param_key``, else ``"lr"`` (torch's)."""
    return str(getattr(scheduler, "param_key", "lr"))


def scheduler_groups(scheduler: Any) -> list[int]:
    """The indices of the groups ``scheduler`` writes.

    Its ``group_indices``; else the groups its ``param_group_tags`` select (:mod:`plugtrain.tags`);
    else every group of its optimizer (a plain torch scheduler).
    """
    indices = getattr(scheduler, "group_indices", None)
    if indices is not None:
        return [int(i) for i in indices]
    groups = scheduler.optimizer.param_groups
    tags = getattr(scheduler, "param_group_tags", None)
    if tags is not None:
        return select_param_groups(groups, tags)
    return list(range(len(groups)))


def scheduler_curve(scheduler: Any) -> Curve | None:
    """The closed form of ``scheduler`` (its ``curve``), or ``None``.

    A curve with ``at`` as it is; a plain callable of the step (plugin API 1.0) wrapped in a
    :class:`~plugtrain.curve.Curve`; anything else counts as no closed form.
    """
    curve = getattr(scheduler, "curve", None)
    if curve is None or not (callable(curve) or callable(getattr(curve, "at", None))):
        return None
    return as_curve(curve, lambda: _owner(scheduler))


def _owner(scheduler: Any) -> str:
    """``"scheduler 'WSD' from acme-plugtrain-wsd 0.1.0"`` (the class's name when unregistered)."""
    from plugtrain.discovery.attribution import describe_owner

    return describe_owner(scheduler)


def scheduler_length(scheduler: Any) -> int | None:
    """The natural number of steps of ``scheduler``: its ``length``, else its curve's, else None."""
    length = getattr(scheduler, "length", None)
    if isinstance(length, int) and not isinstance(length, bool):
        return length
    curve = scheduler_curve(scheduler)
    found = getattr(curve, "length", None)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def last_values(scheduler: Any) -> list[Any]:
    """The values ``scheduler`` last wrote, one per group of :func:`scheduler_groups`.

    Read from ``get_last_value()`` or torch's ``get_last_lr()``, which stay right when another
    scheduler wrote the same groups since; else from the groups themselves.
    """
    for name in ("get_last_value", "get_last_lr"):
        getter = getattr(scheduler, name, None)
        if callable(getter):
            return list(getter())
    groups = scheduler.optimizer.param_groups
    key = scheduler_key(scheduler)
    return [groups[i][key] for i in scheduler_groups(scheduler)]


@contextlib.contextmanager
def keep_group_values(optimizer: Any, keys: Iterable[str] = SCHEDULED_KEYS) -> Iterator[None]:
    """Restore every group's ``lr`` and ``weight_decay`` on leaving the block.

    Wrappers build and step their children inside it, so that a child writing other groups
    (a torch scheduler writes every group) leaves no trace there.
    """
    wanted = tuple(keys)
    saved = [{k: group[k] for k in wanted if k in group} for group in optimizer.param_groups]
    try:
        yield
    finally:
        for group, values in zip(optimizer.param_groups, saved, strict=False):
            group.update(values)


def build_nested(optimizer: Any, build: Callable[[], T]) -> T:
    """Build a scheduler nested in a wrapper: whatever it writes while built is undone.

    A child built for a wrapper writes its first value into the groups it targets (a torch
    scheduler: every group); neither its siblings nor other schedulers may see that. Every
    nested scheduler is built through here, by the Trainer from a run file's plan and by the
    wrappers from ``{Name: {arguments}}`` mappings given in Python.

    :param build: builds the child (on ``optimizer``).
    """
    with keep_group_values(optimizer):
        return build()
