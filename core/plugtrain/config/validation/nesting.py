"""Children a wrapper scheduler cannot take, found before anything is built (no torch here).

A wrapper (``SequentialLR``, ``ChainedLR``, ``ScalePerParamLR``, their weight-decay twins, or a
third party's scheduler with a ``component="scheduler"`` argument) refuses, when it is built:

- a child that schedules the other key (a ``...WD`` in a learning-rate wrapper);
- a child that can only be outermost (its schema's ``nestable`` is false: ``ScalePerParamLR``);
- a child whose own ``param_group_tags`` differ from the wrapper's (the wrapper's tags are
  pushed down to its children);
- a combination its closed form rejects (omitted milestones with a child that has no length, a
  chain whose later child starts at 0), where every child has a closed form to tell.

:func:`nested_scheduler_problems` finds these from the schemas alone, so that ``plugtrain check``
reports them with their position rather than ``fit`` failing later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plugtrain.bases.curve import closed_form
from plugtrain.bases.tags import tag_problems, wanted_tags
from plugtrain.errors import ConfigError, DuplicateNameError, UnknownNameError
from plugtrain.registry.schema import arg_infos

if TYPE_CHECKING:
    from plugtrain.registry.components import Registry

__all__ = ["Problem", "nested_scheduler_problems"]

Problem = tuple[tuple[str | int, ...], str, Any, Any]
"""``(path below the wrapper, message, container, key)``: ``container[key]`` is positioned."""


def _children(
    schema: type, arguments: Mapping[str, Any]
) -> list[tuple[tuple[str | int, ...], Any]]:
    found: list[tuple[tuple[str | int, ...], Any]] = []
    for info in arg_infos(schema):
        if info.component != "scheduler":
            continue
        value = arguments.get(info.name)
        if info.many and isinstance(value, Sequence) and not isinstance(value, str):
            found.extend(((info.name, index), item) for index, item in enumerate(value))
        elif value is not None:
            found.append(((info.name,), value))
    return found


def _same_tags(child_tags: Any, wrapper_tags: Any) -> bool:
    if child_tags is None:
        return True
    if list(tag_problems(child_tags)) or list(tag_problems(wrapper_tags)):
        return True  # reported by the schemas themselves
    return wanted_tags(child_tags) == wanted_tags(wrapper_tags)


def nested_scheduler_problems(
    registry: Registry, name: str, schema: type, arguments: Mapping[str, Any], spec: Any
) -> list[Problem]:
    """What the wrapper ``{name: arguments}`` (``spec``) cannot take among its children.

    Call it once the arguments passed their schema checks. Children that are not
    ``{Name: {arguments}}`` mappings or whose names do not resolve are left to those checks.
    """
    children = _children(schema, arguments)
    if not children:
        return []
    key = getattr(schema, "schedule_key", "lr")
    problems: list[Problem] = []
    for path, child in children:
        if not isinstance(child, Mapping) or len(child) != 1:
            continue
        ((child_name, child_arguments),) = child.items()
        try:
            child_schema = registry.lookup("scheduler", child_name).schema_class
        except (UnknownNameError, DuplicateNameError):
            continue
        where = (*path, str(child_name))
        child_key = getattr(child_schema, "schedule_key", "lr")
        if child_key != key:
            message = (
                f"{child_name} schedules {child_key!r}, but {name} schedules {key!r}; "
                f"nest only schedulers of {key!r}"
            )
            problems.append((where, message, child, child_name))
        if not getattr(child_schema, "nestable", True):
            message = f"{child_name} can only be the outermost scheduler, not a child of {name}"
            problems.append((where, message, child, child_name))
        child_tags = (child_arguments or {}).get("param_group_tags")
        if isinstance(child_arguments, Mapping) and not _same_tags(
            child_tags, arguments.get("param_group_tags")
        ):
            message = (
                f"has param_group_tags {child_tags!r}; give param_group_tags on {name} only, "
                "its children follow it"
            )
            problems.append(
                ((*where, "param_group_tags"), message, child_arguments, "param_group_tags")
            )
    if not problems:
        problems.extend(_closed_form_problems(registry, name, spec))
    return problems


def _closed_form_problems(registry: Registry, name: str, spec: Any) -> list[Problem]:
    """The wrapper's own refusal, when every child has a closed form to evaluate it with."""
    try:
        closed_form(registry, spec, name)
    except (NotImplementedError, ConfigError):
        return []  # a stepped child decides when built; bad arguments are reported elsewhere
    except ValueError as exc:
        return [((), str(exc), spec, name)]
    return []
