"""JSON Schema pieces for Python types: what an annotated argument accepts in a YAML file.

:func:`type_schema` turns an argument's annotation into the JSON Schema of the values a run
file may write for it (YAML's scalars, sequences and mappings); the helpers build references,
unions, bounds and case-insensitive name patterns. Used by :mod:`.jsonschema`; no torch.
"""

from __future__ import annotations

import collections.abc
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

Schema = dict[str, Any]

NOT_WRITABLE: Schema = {"not": {}}
_SIMPLE_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_YAML_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set)
_MAPPINGS = (dict, collections.abc.Mapping)
BOUND_KEYWORDS = (
    ("ge", "minimum"),
    ("gt", "exclusiveMinimum"),
    ("le", "maximum"),
    ("lt", "exclusiveMaximum"),
)
# Characters that must be escaped in an ECMA-262 pattern compiled in unicode mode (what ajv and
# yaml-language-server do); escaping any other character is a syntax error there.
_ECMA_SYNTAX = frozenset("^$\\.*+?()[]{}|/")


def ref(key: str) -> Schema:
    """A reference to the definition ``key`` (escaped as a JSON pointer)."""
    pointer = key.replace("~", "~0").replace("/", "~1")
    return {"$ref": f"#/$defs/{pointer}"}


def nullable(schema: Schema, description: str = "") -> Schema:
    """``schema`` or ``null``."""
    described = {"description": description} if description else {}
    branches = schema["anyOf"] if list(schema) == ["anyOf"] else [schema]
    return {**described, "anyOf": [*branches, {"type": "null"}]}


def admits_mapping(tp: Any) -> bool:
    """Whether the type hint ``tp`` (a union or not) includes a ``dict``."""
    members = (
        typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    )
    return any(typing.get_origin(m) is dict or m is dict for m in members)


def admits_none(tp: Any) -> bool:
    """Whether an argument annotated ``tp`` accepts ``None``."""
    if tp is None or tp is type(None) or tp is Any or tp is object:
        return True
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(admits_none(t) for t in typing.get_args(tp))
    return False


def json_value(value: Any) -> tuple[bool, Any]:
    """``(True, value as JSON data)``, or ``(False, None)`` when it has no JSON form."""
    if value is None or isinstance(value, bool | int | str):
        return True, value
    if isinstance(value, float):
        return (True, value) if math.isfinite(value) else (False, None)
    if isinstance(value, list | tuple):
        items = [json_value(v) for v in value]
        return (True, [v for _, v in items]) if all(ok for ok, _ in items) else (False, None)
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        pairs = {k: json_value(v) for k, v in value.items()}
        if all(ok for ok, _ in pairs.values()):
            return True, {k: v for k, (_, v) in pairs.items()}
    return False, None


def type_schema(tp: Any) -> Schema:
    """The JSON Schema of a value of annotation ``tp``.

    It accepts what :func:`plugtrain.schema.matches_type` accepts from YAML; ``{"not": {}}`` for
    types no run file can hold (callables, other classes).
    """
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp in _SIMPLE_TYPES:
        return {"type": _SIMPLE_TYPES[tp]}
    origin = typing.get_origin(tp)
    targs = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _union([type_schema(t) for t in targs])
    if origin is typing.Literal:
        values = [v for ok, v in map(json_value, targs) if ok]
        return {"enum": values}
    if origin is tuple:
        if len(targs) == 2 and targs[1] is Ellipsis:
            return {"type": "array", "items": type_schema(targs[0])}
        return {
            "type": "array",
            "prefixItems": [type_schema(t) for t in targs],
            "minItems": len(targs),
            "maxItems": len(targs),
        }
    if origin in _SEQUENCES:
        return {"type": "array", "items": type_schema(targs[0])} if targs else {"type": "array"}
    if origin in _MAPPINGS:
        if len(targs) == 2 and type_schema(targs[1]):
            return {"type": "object", "additionalProperties": type_schema(targs[1])}
        return {"type": "object"}
    if origin is collections.abc.Callable or tp is collections.abc.Callable:
        return dict(NOT_WRITABLE)
    if isinstance(tp, type):
        # checked with isinstance: only the Python types YAML produces can pass
        names = [name for base, name in _YAML_TYPES.items() if issubclass(base, tp)]
        if not names:
            return dict(NOT_WRITABLE)
        return {"type": names[0] if len(names) == 1 else names}
    return {}


def _union(branches: list[Schema]) -> Schema:
    if any(not b for b in branches):
        return {}
    writable = [b for b in branches if b != NOT_WRITABLE] or branches[:1]
    if all(list(b) == ["type"] and isinstance(b["type"], str) for b in writable):
        names = list(dict.fromkeys(b["type"] for b in writable))
        return {"type": names[0] if len(names) == 1 else names}
    flat: list[Schema] = []
    for branch in writable:
        for item in branch["anyOf"] if list(branch) == ["anyOf"] else [branch]:
            if item not in flat:
                flat.append(item)
    return flat[0] if len(flat) == 1 else {"anyOf": flat}


def bounded(schema: Schema, bounds: Schema, *, in_array: bool = False) -> Schema:
    """``schema`` with numeric ``bounds`` on the value and on each element of a list or tuple.

    These are the numbers :mod:`plugtrain.schema` checks; numeric keywords ignore other types.
    """
    result = {**schema, **bounds}
    if "anyOf" in schema:
        result["anyOf"] = [bounded(b, bounds, in_array=in_array) for b in schema["anyOf"]]
    if not in_array:
        if isinstance(schema.get("items"), dict):
            result["items"] = bounded(schema["items"], bounds, in_array=True)
        if "prefixItems" in schema:
            result["prefixItems"] = [
                bounded(b, bounds, in_array=True) for b in schema["prefixItems"]
            ]
    return result


def ecma_escape(text: str) -> str:
    """``text`` with the syntax characters of ECMA-262 patterns escaped."""
    return "".join("\\" + c if c in _ECMA_SYNTAX else c for c in text)


def caseless(text: str) -> str:
    """An ECMA-262 pattern matching ``text`` in any case (``[Ss][Gg][Dd]``)."""
    return "".join(
        f"[{c.upper()}{c.lower()}]" if c.upper() != c.lower() else ecma_escape(c) for c in text
    )
