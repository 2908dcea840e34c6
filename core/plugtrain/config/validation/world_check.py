"""``plugtrain check --world-size N``: each backend's parallel plan at N processes (torch-free).

A backend's argument schema may define ``plan_problems(arguments, world_size)`` (the CPU and
GPU backends do: ``dp_shard x dp_replicate`` must be N); each problem is reported at the
argument's ``file:line:column``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plugtrain.config.reading.yaml_loader import location_of
from plugtrain.errors import ConfigIssue, DuplicateNameError, UnknownNameError
from plugtrain.registry.components import Registry

__all__ = ["backend_mappings", "issue_at", "world_size_issues"]


def backend_mappings(data: Any) -> list[tuple[str, Mapping[str, Any] | None]]:
    """``(path, backend mapping)`` of each trainer of a run file, in order (``None``: none)."""
    trainer = data.get("trainer") if isinstance(data, Mapping) else None
    entries: list[tuple[str, Any]]
    if isinstance(trainer, Mapping):
        entries = [("trainer", trainer)]
    elif isinstance(trainer, Sequence) and not isinstance(trainer, str):
        entries = [
            (f"trainer[{i}].trainer", item.get("trainer"))
            for i, item in enumerate(trainer)
            if isinstance(item, Mapping)
        ]
    else:
        entries = []
    found: list[tuple[str, Mapping[str, Any] | None]] = []
    for path, entry in entries:
        init = entry.get("init") if isinstance(entry, Mapping) else None
        backend = init.get("backend") if isinstance(init, Mapping) else None
        found.append((f"{path}.init.backend", backend if isinstance(backend, Mapping) else None))
    return found


def issue_at(path: str, backend: Mapping[str, Any] | None, key: str, message: str) -> ConfigIssue:
    """A problem about ``backend[key]``, at its position (the backend's when not written).

    ``key`` may name an item of a list argument as ``name[index]``.
    """
    name, _, index = key.partition("[")
    where = None
    if backend is not None:
        where = location_of(backend, name) if name in backend else location_of(backend)
        if index and isinstance(backend.get(name), list):
            where = location_of(backend[name], int(index.rstrip("]"))) or where
    return ConfigIssue(f"{path}.{name}" if name else path, message, where)


def world_size_issues(data: Any, registry: Registry, world_size: int) -> list[ConfigIssue]:
    """The problems of each trainer's parallel plan at ``world_size`` processes."""
    issues = []
    for path, backend in backend_mappings(data):
        if backend is None or not isinstance(backend.get("backend_type"), str):
            continue
        try:
            schema = registry.lookup("backend", backend["backend_type"]).schema_class
        except (UnknownNameError, DuplicateNameError):
            continue
        check = getattr(schema, "plan_problems", None)
        if check is None:
            continue
        for problem in check(backend, world_size):
            key = problem.arguments[0] if problem.arguments else ""
            issues.append(issue_at(path, backend, key, problem.message))
    return issues
