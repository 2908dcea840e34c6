"""``model: {name: X, from_config: DIR}``: the keys of a Hugging Face folder's ``config.json``.

The folder's keys (converted by the family's converter) fill the model's arguments; keys
written beside ``from_config`` win and are checked at their own lines; a key taken from the
folder that the schema refuses is reported at the ``from_config`` line. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plugtrain.config.reading.yaml_loader import LocatedDict

if TYPE_CHECKING:
    from plugtrain.config.validation.checker import Checker, Path

__all__ = ["expand_from_config"]


def expand_from_config(
    checker: Checker, name: str, arguments: Mapping[str, Any], path: Path
) -> Mapping[str, Any]:
    """``arguments`` with ``from_config`` replaced by the folder's keys (those written win)."""
    from plugtrain.conversion.declaration import ConversionError
    from plugtrain.conversion.from_config import FROM_CONFIG, model_keys_from_config

    source = arguments[FROM_CONFIG]
    expanded = LocatedDict((k, v) for k, v in arguments.items() if k != FROM_CONFIG)
    marks = getattr(arguments, "value_marks", {})
    expanded.mark = getattr(arguments, "mark", None)
    expanded.key_marks.update(getattr(arguments, "key_marks", {}))
    expanded.value_marks.update(marks)
    if not isinstance(source, str):
        message = "names a Hugging Face folder (or its config.json), a string"
        checker.add((*path, FROM_CONFIG), message, arguments, FROM_CONFIG)
        return expanded
    try:
        found = model_keys_from_config(checker.registry, name, source)
    except ConversionError as exc:
        checker.add((*path, FROM_CONFIG), str(exc), arguments, FROM_CONFIG)
        return expanded
    where = marks.get(FROM_CONFIG)
    for key, value in found.items():
        if key not in expanded:
            expanded[key] = value
            if where is not None:
                expanded.key_marks[key] = expanded.value_marks[key] = where
    return expanded
