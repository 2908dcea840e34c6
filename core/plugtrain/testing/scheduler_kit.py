"""The behavioural conformance check of a scheduler: :func:`check_scheduler`.

Schedulers are tried on a plain ``torch.optim.SGD`` (``lr`` 0.1, ``weight_decay`` 0.01) whose
groups carry the tags the scheduler asks for, the way the Trainer builds tagged param groups.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from plugtrain.bases.scheduler import last_values, scheduler_groups, scheduler_key
from plugtrain.bases.tags import named_tags
from plugtrain.testing.conformance import (
    ConformanceReport,
    NotApplicable,
    PropertyFailed,
    run_properties,
)

__all__ = ["SCHEDULER_PROPERTIES", "check_scheduler"]

SCHEDULER_PROPERTIES = (
    "initial_value",
    "state_round_trip",
    "tag_targeting",
    "closed_form_matches_stepping",
    "nests_in_sequential",
)
"""The properties :func:`check_scheduler` tries, in order (the names ``skip`` takes)."""

REL_TOL = 1e-6
"""Relative tolerance between a closed form and stepped values (they are Python floats)."""

Build = Callable[..., Any]


def _optimizer(*tags: str | None) -> torch.optim.SGD:
    groups: list[dict[str, Any]] = []
    for tag in tags:
        group: dict[str, Any] = {"params": [torch.zeros(2, requires_grad=True)]}
        if tag is not None:
            group["tags"] = tag
        groups.append(group)
    return torch.optim.SGD(groups, lr=0.1, weight_decay=0.01)


def _same(a: Any, b: Any) -> bool:
    return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)


def _takes(build: Build, name: str) -> bool:
    try:
        return name in inspect.signature(build).parameters
    except (TypeError, ValueError):
        return False


class _SchedulerChecks:
    def __init__(
        self,
        build: Build,
        arguments: Mapping[str, Any],
        steps: int,
        schema: type | None,
    ) -> None:
        self.build = build
        self.arguments = dict(arguments)
        self.steps = steps
        self.schema = schema if schema is not None else getattr(build, "schema", None)

    def fresh(self, **extra: Any) -> tuple[torch.optim.SGD, Any]:
        arguments = {**self.arguments, **extra}
        optimizer = _optimizer(None, *named_tags(arguments.get("param_group_tags")))
        return optimizer, self.build(optimizer, **arguments)

    def first_value(self, scheduler: Any) -> float:
        groups = scheduler_groups(scheduler)
        key = scheduler_key(scheduler)
        return float(scheduler.optimizer.param_groups[groups[0]][key])

    def values(self, count: int) -> list[float]:
        optimizer, scheduler = self.fresh()
        found = [self.first_value(scheduler)]
        for _ in range(count - 1):
            optimizer.step()
            scheduler.step()
            found.append(self.first_value(scheduler))
        return found

    def curve(self) -> Any:
        curve_of = getattr(self.schema, "curve", None)
        if self.schema is None or not callable(curve_of):
            raise NotApplicable("the scheduler's schema declares no closed form (curve)")
        from plugtrain.bases.curve import closed_form
        from plugtrain.discovery import loading as plugins
        from plugtrain.registry.schema import validated_arguments

        arguments = validated_arguments(self.schema, self.arguments, owner="scheduler")
        registry = plugins.get_registry()
        return curve_of(arguments, lambda child: closed_form(registry, child).curve)

    # -- the properties -------------------------------------------------------------------

    def initial_value(self) -> None:
        scheduler = self.fresh()[1]
        key = scheduler_key(scheduler)
        groups = scheduler_groups(scheduler)
        written = [scheduler.optimizer.param_groups[i][key] for i in groups]
        last = last_values(scheduler)
        if len(last) != len(written) or not all(
            _same(a, b) for a, b in zip(last, written, strict=True)
        ):
            message = (
                f"after construction the groups hold {key} {written} but the scheduler reports "
                f"{last} (get_last_lr / get_last_value)"
            )
            raise PropertyFailed(message)
        if not all(math.isfinite(float(v)) for v in written):
            raise PropertyFailed(f"the value at step 0 is not finite: {written}")
        try:
            curve = self.curve()
        except NotApplicable:
            return
        if not _same(written[0], curve.at(0)):
            message = f"{key} at step 0 is {written[0]!r}; the closed form says {curve.at(0)!r}"
            raise PropertyFailed(message)

    def state_round_trip(self) -> None:
        from plugtrain.train.checkpointing import round_trip_problems

        problems = round_trip_problems("scheduler", self.build, self.arguments, self.steps)
        if problems:
            raise PropertyFailed("; ".join(problems))

    def tag_targeting(self) -> None:
        if not _takes(self.build, "param_group_tags"):
            raise NotApplicable("the scheduler takes no param_group_tags")
        optimizer = _optimizer(None, "kit_target", "kit_other")
        arguments = {**self.arguments, "param_group_tags": "kit_target"}
        scheduler = self.build(optimizer, **arguments)
        key = scheduler_key(scheduler)
        if scheduler_groups(scheduler) != [1]:
            message = (
                f"with param_group_tags='kit_target' it writes groups "
                f"{scheduler_groups(scheduler)}; only group 1 has that tag"
            )
            raise PropertyFailed(message)
        initial = {0: optimizer.param_groups[0][key], 2: optimizer.param_groups[2][key]}
        for step in range(self.steps):
            optimizer.step()
            scheduler.step()
            for index, value in initial.items():
                now = optimizer.param_groups[index][key]
                if now != value:
                    message = (
                        f"with param_group_tags='kit_target' it changed {key} of untargeted "
                        f"group {index} from {value!r} to {now!r} at step {step + 1}"
                    )
                    raise PropertyFailed(message)

    def closed_form_matches_stepping(self) -> None:
        curve = self.curve()
        count = max(2 * self.steps, min(2 * (curve.length or 0), 60)) + 1
        stepped = self.values(count)
        for step, value in enumerate(stepped):
            if not _same(value, curve.at(step)):
                message = (
                    f"at step {step} stepping gives {value!r}, the closed form {curve.at(step)!r} "
                    f"(rel_tol={REL_TOL:g})"
                )
                raise PropertyFailed(message)

    def nests_in_sequential(self) -> None:
        if not getattr(self.schema, "nestable", True):
            raise NotApplicable("its schema says nestable = False (outermost only)")
        from plugtrain.discovery import loading as plugins

        _probe_optimizer, probe = self.fresh()
        key = scheduler_key(probe)
        wrapper_name = {"lr": "SequentialLR", "weight_decay": "SequentialWD"}.get(key)
        registry = plugins.get_registry()
        if wrapper_name is None:
            raise NotApplicable(f"no Sequential wrapper schedules {key!r}")
        if wrapper_name not in registry.names("scheduler"):
            message = (
                f"{wrapper_name} is not installed, so nesting cannot be tested: install "
                "plugtrain-schedulers where the tests run (add it to the test extra), or opt out "
                "with skip={'nests_in_sequential': reason}"
            )
            raise PropertyFailed(message)
        wrapper = registry.resolve("scheduler", wrapper_name)
        milestone = self.steps
        optimizer = _optimizer(None, *named_tags(self.arguments.get("param_group_tags")))
        children = [self.build(optimizer, **self.arguments) for _ in range(2)]
        extra: dict[str, Any] = {}
        if "param_group_tags" in self.arguments:
            extra["param_group_tags"] = self.arguments["param_group_tags"]
        sequential = wrapper(optimizer, schedulers=children, milestones=[milestone], **extra)
        alone = self.values(milestone + self.steps + 1)
        for step in range(2 * self.steps + 1):
            want = alone[step] if step < milestone else alone[step - milestone]
            got = self.first_value(sequential)
            if not _same(got, want):
                message = (
                    f"as both children of {wrapper_name}(milestones=[{milestone}]) it gives "
                    f"{got!r} at step {step}; alone it gives {want!r} at step "
                    f"{step if step < milestone else step - milestone}"
                )
                raise PropertyFailed(message)
            optimizer.step()
            sequential.step()


def check_scheduler(
    scheduler: Build,
    arguments: Mapping[str, Any] | None = None,
    *,
    skip: Mapping[str, str] | None = None,
    steps: int = 6,
    schema: type | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
) -> ConformanceReport:
    """Check that ``scheduler`` (a class, or ``scheduler(optimizer, **arguments)``) behaves.

    - ``initial_value``: right after construction the groups hold the value the scheduler
      reports (``get_last_value``/``get_last_lr``), finite, and equal to the closed form at
      step 0 when the schema declares one.
    - ``state_round_trip``: after ``steps`` steps, ``state_dict()`` goes through
      ``torch.load(weights_only=True)`` into a fresh scheduler (after the optimizer's state),
      which then writes exactly the uninterrupted scheduler's values.
    - ``tag_targeting``: with ``param_group_tags="kit_target"`` it writes that group only and
      leaves the other groups' values alone (not applicable without ``param_group_tags``).
    - ``closed_form_matches_stepping``: the schema's ``curve`` equals the stepped values for
      ``2 * steps`` steps, or twice the curve's length up to 60 (relative tolerance
      :data:`REL_TOL`); not applicable without a closed form.
    - ``nests_in_sequential``: as both children of the installed ``SequentialLR`` (or
      ``SequentialWD``) with ``milestones=[steps]``, it gives its own values, restarted at the
      milestone (not applicable when its schema says ``nestable = False``; failed, naming
      plugtrain-schedulers, when that wrapper is not installed).

    :param arguments: the scheduler's arguments besides the optimizer.
    :param skip: ``{property: reason}`` for properties that do not apply (kept in the report).
    :param schema: the schema with the closed form, when ``scheduler`` has no ``schema``
        attribute (a class deriving from :class:`plugtrain.scheduler.Scheduler` has one).
    :param name: how messages name it (default: its ``__name__``).
    :param raise_on_failure: ``False`` returns the report instead of raising.
    :raises ConformanceError: (an ``AssertionError``) listing every failed property with values.
    """
    checks = _SchedulerChecks(scheduler, arguments or {}, steps, schema)
    label = f"scheduler {name or getattr(scheduler, '__name__', repr(scheduler))}"
    properties = {prop: getattr(checks, prop) for prop in SCHEDULER_PROPERTIES}
    return run_properties(label, properties, skip, raise_on_failure=raise_on_failure)
