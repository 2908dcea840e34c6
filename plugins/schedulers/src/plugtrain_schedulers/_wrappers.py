"""Schedulers built from other schedulers: sequential, chained, scaled per param group.

A child is any scheduler that meets :class:`plugtrain.protocols.Scheduler`: a built-in one, a
third party's, or a plain ``torch.optim.lr_scheduler.LRScheduler`` (which sets ``lr`` of every
group). Children are given either built (Python, as in cstorch) or as ``{Name: {arguments}}``
mappings (run files), which are built here on the wrapper's optimizer. The wrapper's
``param_group_tags`` are pushed down: a child targets the wrapper's groups, and a child asking
for other tags is an error. The wrapper alone writes values into its groups.

A child with a closed form (a ``curve``) is evaluated at the wrapper's own step and never
stepped, so nested wrappers advance their children too. A child without one is stepped when
the wrapper needs its next value, in a sandbox: it sees its own last values in the groups it
writes, and every group is put back afterwards, so a torch scheduler that writes every group
never disturbs the groups of another scheduler.
"""

from __future__ import annotations

import inspect
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch

from plugtrain.curve import Curve, running_totals
from plugtrain.scheduler import (
    Scheduler,
    build_nested,
    is_scheduler,
    keep_group_values,
    last_values,
    scheduler_curve,
    scheduler_groups,
    scheduler_key,
    scheduler_length,
)
from plugtrain.tags import wanted_tags

__all__ = ["Chained", "ScalePerParam", "Sequential", "Wrapper"]


class _Evaluated:
    """A child with a closed form: its value at any local step, without stepping it."""

    stepped = False

    def __init__(self, curve: Curve, count: int) -> None:
        self.at = curve.at
        self.count = count
        self.length = curve.length

    def values(self, local: int) -> list[Any]:
        return [self.at(local)] * self.count


class _Stepped:
    """A child without a closed form, stepped forward to the local step asked for."""

    stepped = True

    def __init__(self, child: Any, key: str, targets: Sequence[int], where: str) -> None:
        self.child = child
        self.key = key
        self.groups = scheduler_groups(child)
        position = {group: k for k, group in enumerate(self.groups)}
        missing = [g for g in targets if g not in position]
        if missing:
            message = (
                f"{where} ({type(child).__name__}) writes param groups {self.groups}, but the "
                f"wrapper targets {list(targets)}"
            )
            raise ValueError(message)
        self.picks = [position[g] for g in targets]
        self.view = last_values(child)
        if len(self.view) != len(self.groups):
            message = (
                f"{where} ({type(child).__name__}) reports {len(self.view)} last values for "
                f"{len(self.groups)} param groups"
            )
            raise ValueError(message)
        self.local = 0
        self.length = scheduler_length(child)
        self.where = where

    def values(self, local: int) -> list[Any]:
        if local < self.local:
            message = f"{self.where} is at step {self.local} and cannot go back to {local}"
            raise RuntimeError(message)
        while self.local < local:
            self._advance()
        return [self.view[k] for k in self.picks]

    def _advance(self) -> None:
        optimizer = self.child.optimizer
        groups = optimizer.param_groups
        with keep_group_values(optimizer, (self.key,)):
            for group, value in zip(self.groups, self.view, strict=True):
                groups[group][self.key] = value
            self.child.step()
            self.view = [groups[group][self.key] for group in self.groups]
        self.local += 1

    def state_dict(self) -> dict[str, Any]:
        return {"local": self.local, "view": list(self.view), "state": self.child.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        with keep_group_values(self.child.optimizer):
            self.child.load_state_dict(state["state"])
        self.local = int(state["local"])
        self.view = list(state["view"])


_Source = _Evaluated | _Stepped


def _takes_tags(implementation: Any) -> bool:
    try:
        parameters = inspect.signature(implementation).parameters
    except (TypeError, ValueError):
        return False
    return "param_group_tags" in parameters


class Wrapper(Scheduler):
    """A scheduler whose value comes from nested schedulers."""

    children: list[Any]
    _sources: list[_Source]

    def _build_curve(self) -> Curve | None:
        arguments = dict(self.arguments)
        many = "schedulers" in arguments
        specs = list(arguments["schedulers"]) if many else [arguments["scheduler"]]
        self.children = [self._child(spec, i) for i, spec in enumerate(specs)]
        curves = [scheduler_curve(child) for child in self.children]
        self._sources = []
        if all(curve is not None for curve in curves):
            arguments["schedulers" if many else "scheduler"] = (
                self.children if many else self.children[0]
            )
            return self.schema.curve(arguments, _curve_of)
        count = len(self.group_indices)
        name = type(self).__name__
        for index, (child, curve) in enumerate(zip(self.children, curves, strict=True)):
            if curve is not None:
                self._sources.append(_Evaluated(curve, count))
            else:
                where = f"{name}: scheduler {index}"
                self._sources.append(_Stepped(child, self.param_key, self.group_indices, where))
        self._prepare_stepped()
        return None

    def _prepare_stepped(self) -> None:
        """Set up the evaluation of stepped children (milestones, chain starts ...)."""

    def _stepped_values(self, step: int) -> list[Any]:
        """The values at ``step`` when some child has no closed form, one per group."""
        return self._sources[0].values(step)

    def _stepped_length(self) -> int | None:
        return self._sources[0].length

    def _uncurved_values(self, step: int) -> list[Any]:
        return self._stepped_values(step)

    @property
    def length(self) -> int | None:
        """The natural number of steps, from the children's lengths."""
        if self.curve is not None:
            return self.curve.length
        return self._stepped_length()

    def _child(self, spec: Any, index: int) -> Any:
        where = f"{type(self).__name__}: scheduler {index}"
        if is_scheduler(spec):
            child = spec
            self._check_child_tags(where, getattr(child, "param_group_tags", None))
            if child.optimizer is not self.optimizer:
                message = f"{where} ({type(child).__name__}) schedules another optimizer"
                raise ValueError(message)
        elif isinstance(spec, Mapping) and len(spec) == 1:
            child = self._build_child(where, spec)
        else:
            message = (
                f"{where} must be a scheduler (plugtrain.protocols.Scheduler) or a mapping "
                f"{{Name: {{arguments}}}}, got {spec!r}"
            )
            raise TypeError(message)
        key = scheduler_key(child)
        if key != self.param_key:
            message = (
                f"{where} ({type(child).__name__}) schedules {key!r}, "
                f"but {type(self).__name__} schedules {self.param_key!r}"
            )
            raise ValueError(message)
        schema = getattr(type(child), "schema", None)
        if isinstance(child, ScalePerParam) or not getattr(schema, "nestable", True):
            message = f"{where}: {type(child).__name__} can only be the outermost scheduler"
            raise ValueError(message)
        if isinstance(child, Scheduler) and child.curve is not None:
            child.group_indices = list(self.group_indices)
        return child

    def _build_child(self, where: str, spec: Mapping[str, Any]) -> Any:
        from plugtrain import resolve

        ((name, given),) = spec.items()
        arguments = dict(given or {})
        self._check_child_tags(f"{where} ({name})", arguments.get("param_group_tags"))
        implementation = resolve("scheduler", name)
        if _takes_tags(implementation):
            arguments["param_group_tags"] = self.param_group_tags
        return build_nested(self.optimizer, lambda: implementation(self.optimizer, **arguments))

    def _check_child_tags(self, where: str, child_tags: Any) -> None:
        if child_tags is None or wanted_tags(child_tags) == wanted_tags(self.param_group_tags):
            return
        message = (
            f"{where} has param_group_tags {child_tags!r}; give param_group_tags on "
            f"{type(self).__name__} only, its children follow it"
        )
        raise ValueError(message)

    def state_dict(self) -> dict[str, Any]:
        """The position, and the states of children that are stepped rather than evaluated."""
        state = super().state_dict()
        if self.curve is None:
            state["children"] = [
                s.state_dict() if isinstance(s, _Stepped) else None for s in self._sources
            ]
        return state

    def _restore(self, state: Mapping[str, Any]) -> None:
        if self.curve is None:
            saved = state.get("children")
            if not isinstance(saved, Sequence) or len(saved) != len(self._sources):
                message = (
                    f"{type(self).__name__} state holds no state of its stepped children; it "
                    "was saved by a scheduler with other children"
                )
                raise ValueError(message)
            for source, child_state in zip(self._sources, saved, strict=True):
                if isinstance(source, _Stepped):
                    source.load_state_dict(child_state)


def _curve_of(child: Any) -> Curve:
    curve = scheduler_curve(child)
    assert curve is not None
    return curve


class Sequential(Wrapper):
    """Runs its children one after another (the active one is found by bisection)."""

    def _prepare_stepped(self) -> None:
        milestones = self.arguments.get("milestones")
        if milestones is None:
            milestones = running_totals([source.length for source in self._sources])
        self._marks = list(milestones)
        self._offsets = [0, *self._marks]

    def _stepped_values(self, step: int) -> list[Any]:
        i = bisect_right(self._marks, step)
        return self._sources[i].values(step - self._offsets[i])

    def _stepped_length(self) -> int | None:
        last = self._sources[-1].length
        return None if last is None else self._offsets[-1] + last


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
            built = [s for s in specs if is_scheduler(s)] if isinstance(specs, list) else []
            if not built:
                message = (
                    f"{type(self).__name__} takes its optimizer from built schedulers; to build "
                    "children from {Name: {arguments}} mappings, pass the optimizer first"
                )
                raise TypeError(message)
            optimizer = built[0].optimizer
        self._optimizer = optimizer
        return arguments

    def _prepare_stepped(self) -> None:
        self._starts = []
        for i, source in enumerate(self._sources[1:], start=1):
            start = source.values(0)
            if any(value == 0 for value in start):
                message = f"scheduler {i} of a chain starts at 0, so it cannot scale the chain"
                raise ValueError(message)
            self._starts.append(start)

    def _stepped_values(self, step: int) -> list[Any]:
        values = self._sources[0].values(step)
        for source, start in zip(self._sources[1:], self._starts, strict=True):
            scale = source.values(step)
            values = [v * (s / s0) for v, s, s0 in zip(values, scale, start, strict=True)]
        return values


class ScalePerParam(Wrapper):
    """Scales its child's value by each targeted group's first ``scale_keys`` entry (else 1).

    cstorch reads ``adjust_learning_rate``, else ``adjust_val``, for both LR and WD.
    """

    scale_keys: ClassVar[tuple[str, ...]] = ("adjust_learning_rate", "adjust_val")

    def _group_factors(self) -> list[float] | None:
        groups = [self.optimizer.param_groups[i] for i in self.group_indices]
        return [next((float(g[k]) for k in self.scale_keys if k in g), 1.0) for g in groups]
