"""What every scheduler schema shares, and the factory of weight-decay twins (no torch here).

A schema is the single description of a scheduler: its arguments (attrs fields), its rules
across arguments, which group key it schedules (``schedule_key``) and its closed form
(``curve``). The scheduler classes and ``plugtrain plot`` both evaluate ``curve``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import attrs

from plugtrain.schema import Problem, about, arg
from plugtrain_schedulers._tags import tag_problems
from plugtrain_schedulers.curves import Curve

__all__ = ["ChildCurve", "ScheduleSchema", "tags_arg", "weight_decay_text", "weight_decay_twin"]

ChildCurve = Callable[[Any], Curve]
"""Turns a nested scheduler (``{Name: {arguments}}`` or a built scheduler) into its curve."""

Show = Callable[[str], str]
"""Maps a canonical (learning-rate) argument name to the name the user wrote it under."""

# Learning-rate argument name -> (weight-decay name, cstorch's generic alias for it).
WD_NAMES: dict[str, tuple[str, str | None]] = {
    "learning_rate": ("weight_decay", "val"),
    "initial_learning_rate": ("initial_weight_decay", "initial_val"),
    "end_learning_rate": ("end_weight_decay", "end_val"),
    "learning_rates": ("weight_decays", "vals"),
    "base_lr": ("base_weight_decay", "base_val"),
    "max_lr": ("max_weight_decay", "max_val"),
    "max_learning_rate": ("max_weight_decay", "max_val"),
    "lr_lambda": ("wd_lambda", None),
}


def weight_decay_text(text: str) -> str:
    """Documentation of a learning-rate scheduler rewritten for its weight-decay twin."""
    for lr_name in sorted(WD_NAMES, key=len, reverse=True):
        text = text.replace(lr_name, WD_NAMES[lr_name][0])
    return text.replace("learning rate", "weight decay").replace("lr(e)", "wd(e)")


def tags_arg() -> Any:
    """The ``param_group_tags`` argument every scheduler takes."""
    return arg(
        None,
        help="only update param groups carrying one of these tags (None: every group; "
        "[None]: the untagged groups)",
    )


def _same_name(name: str) -> str:
    return name


class ScheduleSchema:
    """Base of the scheduler schemas: tag checks, ``schedule_key``, ``curve`` and ``rules``."""

    schedule_key: ClassVar[str] = "lr"
    """The param-group key the scheduler writes: ``"lr"`` or ``"weight_decay"``."""

    @staticmethod
    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        """The value-of-step function for validated ``arguments``.

        :param arguments: every argument, aliases renamed and defaults filled in.
        :param child_curve: gives the curve of a nested scheduler argument.
        """
        raise NotImplementedError

    @staticmethod
    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[str | Problem]:
        """Messages for broken rules that involve several arguments (learning-rate names)."""
        return ()

    @classmethod
    def cross_check(cls, arguments: Mapping[str, Any]) -> Iterator[str | Problem]:
        """Every rule across arguments, with ``param_group_tags`` checked first."""
        for message in tag_problems(arguments.get("param_group_tags")):
            yield about("param_group_tags", message)
        yield from cls.rules(arguments, _same_name)


def weight_decay_twin(lr_schema: type[ScheduleSchema], name: str) -> type[ScheduleSchema]:
    """The weight-decay schema ``name`` mirroring ``lr_schema``.

    Value arguments are renamed after the seed (``initial_learning_rate`` ->
    ``initial_weight_decay``) and accept cstorch's generic name as an alias (``initial_val``);
    every other argument, constraint and rule is the learning-rate schema's.
    """
    hints = typing.get_type_hints(lr_schema)
    to_wd: dict[str, str] = {}
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    for field in attrs.fields(lr_schema):
        new_name, alias = WD_NAMES.get(field.name, (field.name, None))
        to_wd[field.name] = new_name
        meta = field.metadata["plugtrain"]
        if new_name != field.name:
            meta = attrs.evolve(
                meta,
                help=weight_decay_text(meta.help),
                aliases=() if alias is None else (alias,),
            )
        annotations[new_name] = hints[field.name]
        namespace[new_name] = attrs.field(
            default=field.default, kw_only=True, metadata={"plugtrain": meta}
        )
    to_lr = {new: old for old, new in to_wd.items()}
    lr_curve = lr_schema.curve
    lr_rules = lr_schema.rules

    def curve(arguments: Mapping[str, Any], child_curve: ChildCurve) -> Curve:
        return lr_curve({to_lr.get(k, k): v for k, v in arguments.items()}, child_curve)

    def rules(arguments: Mapping[str, Any], show: Show) -> Iterable[str | Problem]:
        renamed = {to_lr.get(k, k): v for k, v in arguments.items()}
        return lr_rules(renamed, lambda key: to_wd.get(key, key))

    curve.__doc__ = ScheduleSchema.curve.__doc__
    namespace.update(
        __annotations__=annotations,
        __doc__=weight_decay_text(lr_schema.__doc__ or ""),
        __module__=lr_schema.__module__,
        __qualname__=name,
        schedule_key="weight_decay",
        curve=staticmethod(curve),
        rules=staticmethod(rules),
    )
    return attrs.frozen(type(name, (ScheduleSchema,), namespace))
