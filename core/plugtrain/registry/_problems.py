"""What a schema's ``cross_check`` may say, and where each problem of an argument check points.

Public through :mod:`plugtrain.schema` (``about``, ``Problem``, ``ArgumentProblem``); kept apart
so that module stays about declaring and checking arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import attrs

__all__ = ["ArgumentProblem", "Problem", "about"]


@attrs.frozen
class Problem:
    """A broken rule that a schema's ``cross_check`` reports about particular arguments.

    :param message: what is wrong, in words (name the arguments and their values).
    :param arguments: the arguments it is about, most relevant first (canonical names or
        aliases). The first one the user gave places the message: at that key's
        ``file:line:column`` in a run file, as ``Owner.argument`` from Python. When none of them
        was given (all defaults), the message is placed at the component, like a plain string.
    """

    message: str
    arguments: tuple[str, ...] = ()


def about(arguments: str | Iterable[str], message: str) -> Problem:
    """A ``cross_check`` message about one argument (a name) or several (most relevant first).

    For example::

        @staticmethod
        def cross_check(arguments):
            if "{step}" not in arguments["checkpoint_name"]:
                yield about("checkpoint_name", "checkpoint_name must contain '{step}'")
            if arguments["nesterov"] and arguments["momentum"] <= 0:
                yield about(("nesterov", "momentum"), "nesterov=True needs momentum > 0")

    A ``cross_check`` may also yield a plain string: a message about the component as a whole.

    :param arguments: an argument name, or several.
    :param message: what is wrong.
    """
    names = (arguments,) if isinstance(arguments, str) else tuple(arguments)
    return Problem(message, names)


class ArgumentProblem(NamedTuple):
    """One problem found by :func:`plugtrain.schema.argument_problems`.

    :param key: the argument as the user wrote it (an alias stays an alias), a dotted key into a
        nested component, or ``""`` for the component as a whole.
    :param message: what is wrong.
    :param of_key: the problem is about the key rather than its value (an unknown name, an
        argument given twice, a rule across arguments): a run file places it at the key.
    """

    key: str
    message: str
    of_key: bool = False


def cross_check_problem(
    found: str | Problem, written: Mapping[str, str], alias_of: Mapping[str, str]
) -> ArgumentProblem:
    """Where one ``cross_check`` message goes.

    :param found: what ``cross_check`` yielded.
    :param written: canonical name -> the key the user wrote it under, for the given arguments.
    :param alias_of: alias -> canonical name.
    """
    if isinstance(found, str):
        return ArgumentProblem("", found)
    for name in found.arguments:
        key = written.get(alias_of.get(name, name))
        if key is not None:
            return ArgumentProblem(key, found.message, of_key=True)
    return ArgumentProblem("", found.message)
