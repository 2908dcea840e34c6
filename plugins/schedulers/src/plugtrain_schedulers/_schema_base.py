"""The factory of weight-decay twins (no torch here).

The schema base itself, :class:`~plugtrain.scheduler.ScheduleSchema` with ``ChildCurve``,
``Show`` and ``tags_arg``, is in the core's :mod:`plugtrain.scheduler` (third-party schedulers
share it).
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from plugtrain.curve import Curve
from plugtrain.scheduler import ChildCurve, ScheduleSchema, Show
from plugtrain.schema import Problem

__all__ = ["weight_decay_text", "weight_decay_twin"]

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
        nestable=lr_schema.nestable,
        curve=staticmethod(curve),
        rules=staticmethod(rules),
    )
    return attrs.frozen(type(name, (ScheduleSchema,), namespace))
