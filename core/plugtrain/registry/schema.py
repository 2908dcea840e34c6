"""Argument schemas: torch-free declarations of what a component accepts.

A schema is an attrs class whose fields are declared with :func:`arg`. It lives in a module that
does not import torch, so listing, describing and validating never import an implementation::

    @attrs.frozen
    class SGDArgs:
        \"\"\"Stochastic gradient descent with momentum (cstorch numerics).\"\"\"

        lr: float = arg(help="learning rate", ge=0, aliases=("learning_rate",))
        momentum: float = arg(0.0, ge=0)

The field's annotation is its type (checked as in :func:`matches_type`), :func:`arg`'s keywords
are its constraints. A schema may define ``cross_check(arguments)`` (a staticmethod) for rules
that involve several arguments; it receives every argument (canonical names, defaults filled in)
and yields one message per broken rule: :func:`about` when the message is about particular
arguments (a run file then places it at the first of them that is written), a plain string when
it is about the component as a whole::

        @staticmethod
        def cross_check(arguments):
            if arguments["nesterov"] and arguments["momentum"] <= 0:
                yield about(("nesterov", "momentum"), "nesterov=True needs momentum > 0")

Every value a schema accepts is one training can use: a ``float`` argument (each element of a
list or tuple of floats) must be finite and within float32's range, an ``int`` argument must fit a
64-bit integer (``arg(finite=False)`` turns both off, for an argument with its own bounds), and a
string never holds a NUL character (no path or name can).
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from plugtrain.registry._problems import ArgumentProblem, Problem, about, cross_check_problem

__all__ = [
    "REQUIRED",
    "ArgInfo",
    "ArgumentProblem",
    "Problem",
    "about",
    "arg",
    "arg_infos",
    "argument_problems",
    "bind_arguments",
    "canonical_arguments",
    "check_arguments",
    "constructor_signature",
    "matches_type",
    "validated_arguments",
]

REQUIRED: Any = attrs.NOTHING
"""Marks an argument that must be given. Constructors may use it as a default (``lr=REQUIRED``)
so that an alias (``learning_rate``) can stand in for the argument; a value equal to
``REQUIRED`` counts as not given."""

_META_KEY = "plugtrain"

FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: a float argument beyond it overflows in tensor arithmetic."""
INT64_MAX = 2**63 - 1
"""The largest int64: an int argument beyond it overflows in torch and in C APIs."""


@attrs.frozen
class _Constraint:
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[Any, ...] | None = None

    def describe(self) -> str:
        parts = []
        if self.ge is not None:
            parts.append(f">= {_bound(self.ge)}")
        if self.gt is not None:
            parts.append(f"> {_bound(self.gt)}")
        if self.le is not None:
            parts.append(f"<= {_bound(self.le)}")
        if self.lt is not None:
            parts.append(f"< {_bound(self.lt)}")
        if self.choices is not None:
            parts.append("one of " + ", ".join(repr(c) for c in self.choices))
        return ", ".join(parts)

    def violation(self, value: Any) -> str | None:
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(repr(c) for c in self.choices)}, got {value!r}"
        for number in _numbers_in(value):
            if self.ge is not None and not number >= self.ge:
                return f"must be >= {_bound(self.ge)}, got {value!r}"
            if self.gt is not None and not number > self.gt:
                return f"must be > {_bound(self.gt)}, got {value!r}"
            if self.le is not None and not number <= self.le:
                return f"must be <= {_bound(self.le)}, got {value!r}"
            if self.lt is not None and not number < self.lt:
                return f"must be < {_bound(self.lt)}, got {value!r}"
        return None


def _bound(number: float) -> str:
    """A bound as written: ints exactly (a seed's 2**64 - 1), floats briefly."""
    return str(number) if isinstance(number, int) else f"{number:g}"


def _numbers_in(value: Any) -> Iterable[float]:
    """The numbers a bound applies to: the value itself, or each element of a tuple/list."""
    if isinstance(value, bool):
        return ()
    if isinstance(value, int | float):
        return (value,)
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
    return ()


@attrs.frozen
class _ArgMeta:
    help: str
    constraint: _Constraint
    aliases: tuple[str, ...]
    component: str | None
    many: bool
    section: type | None = None
    finite: bool = True


def arg(
    default: Any = REQUIRED,
    *,
    help: str = "",  # noqa: A002 - the natural name for an argument's help text
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Iterable[Any] | None = None,
    aliases: Iterable[str] = (),
    component: str | None = None,
    many: bool = False,
    section: type | None = None,
    finite: bool = True,
) -> Any:
    """Declare one argument of a component schema.

    :param default: the default value; omit for a required argument. Mutable defaults (lists,
        dicts) are copied per instance.
    :param help: one line saying what the argument does.
    :param ge: inclusive lower bound (applies to each element of a tuple or list).
    :param gt: exclusive lower bound.
    :param le: inclusive upper bound.
    :param lt: exclusive upper bound.
    :param choices: the only values allowed.
    :param aliases: other names accepted for this argument (e.g. ``learning_rate`` for ``lr``);
        giving an argument under two of its names is an error.
    :param component: the value is a nested component of this kind, written as a one-key
        mapping ``{Name: {arguments}}`` (or an already built object from Python).
    :param many: with ``component``: the value is a list of such components.
    :param section: the value is a mapping checked against this schema (a config section).
    :param finite: a float must be finite and within float32's range, an int within int64's;
        ``False`` for an argument whose explicit bounds say what it accepts (a seed).
    :returns: an ``attrs.field`` carrying the metadata; use it as the field's default.
    """
    meta = _ArgMeta(
        help=help,
        constraint=_Constraint(
            ge=ge, gt=gt, le=le, lt=lt, choices=None if choices is None else tuple(choices)
        ),
        aliases=tuple(aliases),
        component=component,
        many=many,
        section=section,
        finite=finite,
    )
    if isinstance(default, list | dict | set):
        factory = functools.partial(type(default), default)
        return attrs.field(factory=factory, kw_only=True, metadata={_META_KEY: meta})
    return attrs.field(default=default, kw_only=True, metadata={_META_KEY: meta})


@attrs.frozen
class ArgInfo:
    """What one argument of a component accepts, for ``describe`` and ``plugtrain show``.

    :param name: the argument's name.
    :param type: the annotation as written, e.g. ``"float | None"``.
    :param required: whether it must be given.
    :param default: the default value (``None`` when required).
    :param constraint: the bounds or choices in words, ``""`` if none.
    :param help: one line of description.
    :param aliases: other accepted names.
    :param component: the kind of a nested component, if the value is one.
    :param many: whether the value is a list of nested components.
    """

    name: str
    type: str
    required: bool
    default: Any
    constraint: str
    help: str
    aliases: tuple[str, ...]
    component: str | None
    many: bool

    def to_dict(self) -> dict[str, Any]:
        """The argument as plain JSON-friendly data."""
        return attrs.asdict(self, recurse=False, value_serializer=_jsonable)


def _jsonable(_inst: Any, _field: Any, value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def _meta(field: attrs.Attribute[Any]) -> _ArgMeta:
    meta = field.metadata.get(_META_KEY)
    if meta is None:
        return _ArgMeta("", _Constraint(), (), None, False)
    return meta  # type: ignore[no-any-return]


def section_of(schema: type, name: str) -> type | None:
    """The section schema of argument ``name`` of ``schema``, if it is a section."""
    for field, _hint in _fields(schema):
        if field.name == name:
            return _meta(field).section
    return None


def _default_of(field: attrs.Attribute[Any]) -> Any:
    default = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return default.factory()  # type: ignore[union-attr]
    return default


@functools.cache
def _fields(schema: type) -> tuple[tuple[attrs.Attribute[Any], Any], ...]:
    """The schema's fields with their resolved annotations (cached per schema)."""
    hints = typing.get_type_hints(schema)
    return tuple((field, hints.get(field.name, Any)) for field in attrs.fields(schema))


def arg_infos(schema: type) -> list[ArgInfo]:
    """Describe every argument of ``schema`` in declaration order."""
    infos = []
    for field, _hint in _fields(schema):
        meta = _meta(field)
        required = field.default is attrs.NOTHING
        written = field.type if isinstance(field.type, str) else _type_name(field.type)
        infos.append(
            ArgInfo(
                name=field.name,
                type=written,
                required=required,
                default=None if required else _default_of(field),
                constraint=meta.constraint.describe(),
                help=meta.help,
                aliases=meta.aliases,
                component=meta.component,
                many=meta.many,
            )
        )
    return infos


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def matches_type(value: Any, tp: Any) -> bool:
    """Whether ``value`` (as written in a config or passed from Python) fits annotation ``tp``.

    Numbers follow YAML: an ``int`` is a valid ``float``; ``bool`` is never a number. Lists and
    tuples are interchangeable for ``tuple[...]`` and ``list[...]`` annotations.
    """
    if tp is Any or tp is object:
        return True
    if tp is None or tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    origin = typing.get_origin(tp)
    targs = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return any(matches_type(value, t) for t in targs)
    if origin is typing.Literal:
        return any(value == t and type(value) is type(t) for t in targs)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False
        if len(targs) == 2 and targs[1] is Ellipsis:
            return all(matches_type(v, targs[0]) for v in value)
        return len(value) == len(targs) and all(map(matches_type, value, targs))
    if origin in (list, collections.abc.Sequence, set, frozenset, collections.abc.Set):
        if not isinstance(value, list | tuple | set | frozenset):
            return False
        return not targs or all(matches_type(v, targs[0]) for v in value)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, Mapping):
            return False
        if not targs:
            return True
        return all(
            matches_type(k, targs[0]) and matches_type(v, targs[1]) for k, v in value.items()
        )
    if origin is collections.abc.Callable or tp is collections.abc.Callable:
        return callable(value)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def canonical_arguments(
    schema: type, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Rename aliases to canonical argument names.

    :returns: the renamed arguments and a list of ``(key, message)`` problems: an argument given
        under two names, or a key the schema does not know (with a suggestion).
    """
    renamed, _written, _alias_of, problems = _canonical(schema, arguments)
    return renamed, problems


def _canonical(
    schema: type, arguments: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str], dict[str, str], list[tuple[str, str]]]:
    """Renamed arguments, canonical name -> key as written, alias -> canonical, problems."""
    alias_of: dict[str, str] = {}
    names = []
    for field, _hint in _fields(schema):
        names.append(field.name)
        for alias in _meta(field).aliases:
            alias_of[alias] = field.name
    renamed: dict[str, Any] = {}
    written: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for key, value in arguments.items():
        if value is REQUIRED:
            continue
        canonical = key if key in names else alias_of.get(key)
        if canonical is None:
            known = names + list(alias_of)
            problems.append((key, _unknown_argument_message(key, known, schema.__name__)))
            continue
        if canonical in renamed:
            problems.append(
                (key, f"'{key}' and '{written[canonical]}' name the same argument; give only one")
            )
            continue
        renamed[canonical] = value
        written[canonical] = key
    return renamed, written, alias_of, problems


def _unknown_argument_message(key: str, known: list[str], owner: str = "") -> str:
    from plugtrain.registry._suggest import MODEL_ZOO_ONLY, did_you_mean

    plainly = MODEL_ZOO_ONLY.get((owner, str(key)))
    if plainly is not None:
        return f"unknown argument '{key}': {plainly}."
    hint = did_you_mean(str(key), known)
    accepted = ", ".join(known) if known else "none"
    return f"unknown argument '{key}'.{hint} Accepted: {accepted}."


def check_arguments(
    schema: type,
    arguments: Mapping[str, Any],
    *,
    nested: Callable[[str, Any, str], list[tuple[str, str]]] | None = None,
) -> list[tuple[str, str]]:
    """Check ``arguments`` against ``schema`` without building anything; report every problem.

    :param schema: the component's attrs schema class.
    :param arguments: argument name to value, as written (aliases allowed).
    :param nested: called as ``nested(kind, value, key)`` for each nested-component argument;
        returns problems as ``(dotted key relative to this component, message)``.
    :returns: ``(key, message)`` pairs (as :func:`argument_problems`, without ``of_key``); empty
        when the arguments are valid.
    """
    return [(p.key, p.message) for p in argument_problems(schema, arguments, nested=nested)]


def argument_problems(
    schema: type,
    arguments: Mapping[str, Any],
    *,
    nested: Callable[[str, Any, str], list[tuple[str, str]]] | None = None,
) -> list[ArgumentProblem]:
    """Every problem of ``arguments``, each keyed by the argument it is about, as written.

    Field checks come first; ``cross_check`` runs only when they all pass, and each of its
    :func:`about` messages is keyed by the first of its arguments that was given (a plain string,
    or none of them given: key ``""``).

    :param schema: the component's attrs schema class.
    :param arguments: argument name to value, as written (aliases allowed).
    :param nested: as for :func:`check_arguments`.
    """
    renamed, written, alias_of, found = _canonical(schema, arguments)
    problems = [ArgumentProblem(key, message, of_key=True) for key, message in found]
    complete: dict[str, Any] = {}
    for field, hint in _fields(schema):
        meta = _meta(field)
        if field.name not in renamed:
            if field.default is attrs.NOTHING:
                missing = f"missing required argument '{field.name}'"
                problems.append(ArgumentProblem(field.name, missing))
            else:
                complete[field.name] = _default_of(field)
            continue
        value = renamed[field.name]
        complete[field.name] = value
        key = written[field.name]
        message = _value_problem(value, hint, field, meta)
        if message is not None:
            problems.append(ArgumentProblem(key, message))
        elif meta.component is not None and nested is not None:
            problems.extend(ArgumentProblem(k, m) for k, m in nested(meta.component, value, key))
    if not problems:
        cross_check = getattr(schema, "cross_check", None)
        if cross_check is not None:
            problems.extend(
                cross_check_problem(found, written, alias_of) for found in cross_check(complete)
            )
    return problems


def _value_problem(
    value: Any, hint: Any, field: attrs.Attribute[Any], meta: _ArgMeta
) -> str | None:
    if meta.component is not None:
        if value is None and matches_type(None, hint):
            return None
        return _component_shape_problem(value, meta)
    if meta.section is not None:
        if value is None or isinstance(value, Mapping):
            return None
        return f"must be a mapping of {field.name} settings, got {type(value).__name__}"
    if not matches_type(value, hint):
        written = field.type if isinstance(field.type, str) else _type_name(hint)
        return f"must be of type {written}, got {type(value).__name__} {value!r}"
    return _unusable(value, hint, meta) or meta.constraint.violation(value)


def _unusable(value: Any, hint: Any, meta: _ArgMeta) -> str | None:
    """Why training could not use a value its type admits (overflow, NUL), or ``None``."""
    written = _written_types(hint)
    items = value if isinstance(value, list | tuple) else (value,)
    if "str" in written and any(isinstance(v, str) and "\0" in v for v in items):
        return f"must not contain a NUL character (\\0), got {value!r}"
    if not meta.finite:
        return None
    for number in _numbers_in(value):
        if "float" in written:
            if isinstance(number, float) and not math.isfinite(number):
                return f"must be a finite number, got {value!r}"
            if abs(number) > FLOAT32_MAX:
                return f"must be within float32's range (|x| <= {FLOAT32_MAX:.7g}), got {value!r}"
        elif "int" in written and abs(number) > INT64_MAX:
            return f"must fit a 64-bit integer (|x| <= {INT64_MAX}), got {value!r}"
    return None


@functools.cache
def _written_types(hint: Any) -> frozenset[str]:
    """Which of float, int and str annotation ``hint`` admits, at any depth."""
    found = {t.__name__ for t in (float, int, str) if hint is t}
    if typing.get_origin(hint) is collections.abc.Callable:
        return frozenset()  # a callable's argument types are not values written in a file
    for inner in typing.get_args(hint):
        if not isinstance(inner, list):  # Concatenate and similar parameter lists
            found |= _written_types(inner)
    return frozenset(found)


def _component_shape_problem(value: Any, meta: _ArgMeta) -> str | None:
    items = value if meta.many else [value]
    if meta.many and not isinstance(value, list | tuple):
        got = "a mapping" if isinstance(value, Mapping) else type(value).__name__
        return f"must be a list of {meta.component}s, got {got}"
    for item in items:
        if isinstance(item, Mapping) and len(item) != 1:
            return f"each {meta.component} must be a one-key mapping {{Name: {{arguments}}}}"
    return None


def validated_arguments(
    schema: type, arguments: Mapping[str, Any], *, owner: str
) -> dict[str, Any]:
    """Check ``arguments`` and return them with aliases renamed and defaults filled in.

    Constructors call this so that Python users get the same checks as run files.

    :param owner: the component's name, used in messages (``"SGD"``).
    :raises ConfigError: (a ``ValueError``) naming every bad argument and its value.
    """
    from plugtrain.errors import ConfigError, ConfigIssue

    problems = check_arguments(schema, arguments)
    if problems:
        raise ConfigError([ConfigIssue(_join(owner, key), message) for key, message in problems])
    renamed, _ = canonical_arguments(schema, arguments)
    complete = {}
    for field, _hint in _fields(schema):
        complete[field.name] = renamed[field.name] if field.name in renamed else _default_of(field)
    return complete


def _join(owner: str, key: str) -> str:
    return f"{owner}.{key}" if key else owner


def constructor_signature(schema: type, context: Sequence[str] = ()) -> inspect.Signature:
    """The constructor signature a schema implies: ``(context..., <fields>, **kwargs)``.

    Components set it as their class's ``__signature__`` so that signature and schema cannot
    drift apart; ``**kwargs`` is present only when some argument has aliases.

    :param context: leading parameters supplied by the caller (``params``, ``optimizer``).
    """
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter(name, positional) for name in context]
    has_aliases = False
    for field, _hint in _fields(schema):
        parameters.append(inspect.Parameter(field.name, positional, default=_default_of(field)))
        has_aliases = has_aliases or bool(_meta(field).aliases)
    if has_aliases:
        parameters.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(parameters)


def bind_arguments(
    signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The arguments actually given, by name (positional ones in the signature's order).

    Defaults are not filled in (the schema does that), values equal to :data:`REQUIRED` count
    as not given, and unknown keywords are kept for :func:`validated_arguments` to report with
    suggestions.

    :raises TypeError: for too many positional arguments or one given twice.
    """
    named = {k: v for k, v in kwargs.items() if k in signature.parameters and k != "kwargs"}
    arguments = dict(signature.bind_partial(*args, **named).arguments)
    arguments.update(arguments.pop("kwargs", {}))
    arguments.update((k, v) for k, v in kwargs.items() if k not in named)
    return {k: v for k, v in arguments.items() if v is not REQUIRED}
