"""Paths in the encoders' data sections: ``$MODELZOO_ROOT`` and existence (torch-free).

Model Zoo expands ``$MODELZOO_ROOT`` to its own package folder; plugtrain ships no
vocabulary, so it reads the folder from the environment variable of that name. Every other
variable is expanded as :func:`os.path.expandvars` does. Relative paths are relative to the
working directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from plugtrain.errors import TrainingError
from plugtrain.schema import Problem, about

__all__ = ["ROOT_VARIABLE", "expand", "path_problems", "resolved"]

ROOT_VARIABLE = "MODELZOO_ROOT"
"""The environment variable that stands for Model Zoo's package folder."""

_ROOT = re.compile(r"\$(\{MODELZOO_ROOT\}|MODELZOO_ROOT\b)")


def expand(path: str) -> str:
    """``path`` with its environment variables expanded.

    :raises ValueError: ``path`` names ``$MODELZOO_ROOT`` and the variable is not set (the
        message names the variable and the path).
    """
    if _ROOT.search(path) and not os.environ.get(ROOT_VARIABLE):
        message = (
            f"{path} names ${ROOT_VARIABLE}, and the environment variable {ROOT_VARIABLE} is "
            f"not set: set it to the folder that holds Model Zoo's files (models/vocab/...)"
        )
        raise ValueError(message)
    return os.path.expandvars(path)


def path_problems(key: str, value: Any, *, folder: bool | None = None) -> Iterator[Problem]:
    """What is wrong with the path(s) ``value`` of argument ``key`` (nothing for ``None``).

    :param folder: ``True``: each must be a folder; ``False``: a file; ``None``: either.
    """
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list | tuple):
        return  # None, or a value of the wrong type: the schema's type check reports it
    for path in paths:
        if not isinstance(path, str):
            continue
        try:
            full = expand(path)
        except ValueError as exc:
            yield about(key, str(exc))
            continue
        if not os.path.exists(full):
            yield about(key, f"Path {full} does not exist.")
        elif folder is True and not os.path.isdir(full):
            yield about(key, f"Path {full} is a file; {key} names a folder.")
        elif folder is False and os.path.isdir(full):
            yield about(key, f"Path {full} is a folder; {key} names a file.")


def resolved(key: str, path: str) -> str:
    """``path`` expanded, for a loader being built.

    :raises TrainingError: the path cannot be expanded or does not exist (``key`` names it).
    """
    try:
        full = expand(path)
    except ValueError as exc:
        raise TrainingError(f"{key}: {exc}") from None
    if not os.path.exists(full):
        raise TrainingError(f"{key}: Path {full} does not exist.")
    return full
