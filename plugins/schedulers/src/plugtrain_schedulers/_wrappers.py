"""Schedulers built from other schedulers: sequential, chained, scaled per param group.

Children are given either built (Python, as in cstorch) or as ``{Name: {arguments}}`` mappings
(run files), which are built here on the wrapper's optimizer. The wrapper's ``param_group_tags``
are pushed down: a child targets the wrapper's groups, and a child asking for other tags is an
error. The wrapper alone writes values; it evaluates its children's closed forms at its own
step, so nested wrappers advance their children too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from plugtrain_schedulers._base import Scheduler
from plugtrain_schedulers._tags import wanted_tags
from plugtrain_schedulers.curves import Curve

__all__ = ["Chained", "ScalePerParam", "Sequential", "Wrapper"]


class Wrapper(Scheduler):
    """A scheduler whose value comes from nested schedulers."""

    children: list[Scheduler]

    def _build_curve(self) -> Curve:
        arguments = dict(self.arguments)
        if "schedulers" in arguments:
            specs = list(arguments["schedulers"])
            self.children = [self._child(spec, i) for i, spec in enumerate(specs)]
            arguments["schedulers"] = self.children
        else:
            self.children = [self._child(arguments["scheduler"], 0)]
            arguments["scheduler"] = self.children[0]
        return self.schema.curve(arguments, _curve_of)

    def _child(self, spec: Any, index: int) -> Scheduler:
        where = f"{type(self).__name__}: scheduler {index}"
        if isinstance(spec, Scheduler):
            child = spec
            self._check_child_tags(where, child.param_group_tags)
            if child.optimizer is not self.optimizer:
                message = f"{where} ({type(child).__name__}) schedules another optimizer"
                raise ValueError(message)
            child.group_indices = list(self.group_indices)
        elif isinstance(spec, Mapping) and len(spec) == 1:
            child = self._build_child(where, spec)
        else:
            message = (
                f"{where} must be a scheduler or a mapping {{Name: {{arguments}}}}, got {spec!r}"
            )
            raise TypeError(message)
        if child.param_key != self.param_key:
            message = (
                f"{where} ({type(child).__name__}) schedules {child.param_key!r}, "
                f"but {type(self).__name__} schedules {self.param_key!r}"
            )
            raise ValueError(message)
        if isinstance(child, ScalePerParam):
            message = f"{where}: {type(child).__name__} can only be the outermost scheduler"
            raise ValueError(message)  # noqa: TRY004 - a wrong arrangement, not a wrong type
        return child

    def _build_child(self, where: str, spec: Mapping[str, Any]) -> Scheduler:
        from plugtrain import resolve

        ((name, given),) = spec.items()
        arguments = dict(given or {})
        self._check_child_tags(f"{where} ({name})", arguments.get("param_group_tags"))
        arguments["param_group_tags"] = self.param_group_tags
        built: Scheduler = resolve("scheduler", name)(self.optimizer, **arguments)
        return built

    def _check_child_tags(self, where: str, child_tags: Any) -> None:
        if child_tags is None or wanted_tags(child_tags) == wanted_tags(self.param_group_tags):
            return
        message = (
            f"{where} has param_group_tags {child_tags!r}; give param_group_tags on "
            f"{type(self).__name__} only, its children follow it"
        )
        raise ValueError(message)


def _curve_of(child: Scheduler) -> Curve:
    return child.curve


class Sequential(Wrapper):
    """Runs its children one after another (the active one is found by bisection)."""


class Chained(Wrapper):
    """Multiplies its children's values; takes the children's optimizer (cstorch's signature)."""

    takes_optimizer: ClassVar[bool] = False

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(kwargs)
        optimizer = kwargs.pop("optimizer", None)
        if args and isinstance(args[0], torch.optim.Optimizer):
            optimizer, args = args[0], args[1:]
        arguments = self._bind_names(args, kwargs)
        if optimizer is None:
            specs = arguments.get("schedulers")
            built = (
                [s for s in specs if isinstance(s, Scheduler)] if isinstance(specs, list) else []
            )
            if not built:
                message = (
                    f"{type(self).__name__} takes its optimizer from built schedulers; to build "
                    "children from {Name: {arguments}} mappings, pass the optimizer first"
                )
                raise TypeError(message)
            optimizer = built[0].optimizer
        self._optimizer = optimizer
        return arguments


class ScalePerParam(Wrapper):
    """Scales its child's value by each targeted group's first ``scale_keys`` entry (else 1).

    cstorch reads ``adjust_learning_rate``, else ``adjust_val``, for both LR and WD.
    """

    scale_keys: ClassVar[tuple[str, ...]] = ("adjust_learning_rate", "adjust_val")

    def _group_factors(self) -> list[float] | None:
        groups = [self.optimizer.param_groups[i] for i in self.group_indices]
        return [next((float(g[k]) for k in self.scale_keys if k in g), 1.0) for g in groups]
