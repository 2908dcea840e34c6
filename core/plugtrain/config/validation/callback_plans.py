"""What a callback can only check against the rest of its trainer (torch-free).

A callback's schema may answer ``plan_problems(arguments, trainer)``, with the trainer's
:class:`plugtrain.config.plan.TrainerPlan`, yielding :func:`plugtrain.schema.about` problems or
plain strings: rules that involve the model or the sparsity (LoRA's targets must be layers the
model has). Each is placed at the argument it names, else at the callback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plugtrain.config.plan import TrainerPlan
from plugtrain.config.validation.checker import Checker, Path
from plugtrain.errors import PlugtrainError
from plugtrain.registry._problems import Problem

__all__ = ["check_callback_plans"]


def check_callback_plans(
    checker: Checker, plan: TrainerPlan, init: Mapping[str, Any], path: Path
) -> None:
    """Add the ``plan_problems`` of every callback written in ``init`` (see the module)."""
    entries = init.get("callbacks")
    if not isinstance(entries, list):
        return
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or len(entry) != 1:
            continue
        ((name, arguments),) = entry.items()
        if not isinstance(arguments, Mapping):
            continue
        try:
            schema = checker.registry.lookup("callback", str(name)).schema_class
        except PlugtrainError:
            continue
        answer = getattr(schema, "plan_problems", None)
        if not callable(answer):
            continue
        where = (*path, "callbacks", index, name)
        for found in answer(arguments, plan):
            key = next((k for k in getattr(found, "arguments", ()) if k in arguments), None)
            message = found.message if isinstance(found, Problem) else str(found)
            if key is None:
                checker.add(where, message, entries, index)
            else:
                checker.add((*where, key), message, arguments, key)
