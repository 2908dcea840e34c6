"""Write :mod:`plugtrain_bridges.table` from the installed libraries (imports torch).

Run ``python -m plugtrain_bridges.generate`` after upgrading torch or pytorch-optimizer; a test
checks that the table equals what this script makes of the installed versions.

An optimizer is bridged when every required constructor argument but ``params`` can be written
in a run file (a number, a flag, a string, a tuple of numbers) and its ``step`` does not need a
closure. An optional argument that cannot be written (a function, a module) is left out of the
schema and keeps its default. Types come from the signature's annotations (``Tensor`` dropped
from unions), else from the default's type; help texts from the docstring's ``Args:`` section.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

from plugtrain_bridges.libraries import LIBRARIES, Library

__all__ = ["bridged_optimizers", "main", "render_table"]

TABLE = Path(__file__).with_name("table.py")

_SCALARS = {float: "float", int: "int", bool: "bool", str: "str", type(None): "None"}
_ARG_LINE = re.compile(r"^\s+\*{0,2}(\w+)(?: \(([^)]*)\))?: ?(.*)$")
_HELP_LENGTH = 120

Row = tuple[str, str, str, tuple[tuple[str, str, Any, str, tuple[Any, ...]], ...]]
"""One optimizer: name, import target, summary, and its arguments (name, type, default, help,
choices); a required argument's default is the string ``"<required>"``."""

REQUIRED = "<required>"


def _is_tensor(tp: Any) -> bool:
    return getattr(tp, "__name__", "") == "Tensor" or str(tp).endswith("Tensor")


def _type_of(tp: Any) -> tuple[str, tuple[Any, ...]] | None:
    """A run-file type string for annotation ``tp`` (and its choices), or None when it has none."""
    if tp in _SCALARS:
        return _SCALARS[tp], ()
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        values = typing.get_args(tp)
        kinds = {type(v) for v in values}
        if len(kinds) == 1 and kinds <= set(_SCALARS):
            return _SCALARS[kinds.pop()], tuple(values)
        return None
    if origin is typing.Union or origin is types.UnionType:
        parts = [a for a in typing.get_args(tp) if not _is_tensor(a)]
        found = [_type_of(a) for a in parts]
        if not parts or any(f is None for f in found):
            return None
        known = [f for f in found if f is not None]
        names = list(dict.fromkeys(f[0] for f in known))
        if "None" in names:  # None last, as written by hand
            names = [*(n for n in names if n != "None"), "None"]
        # choices hold only when every part but None is a Literal
        literal = all(f[1] for f in known if f[0] != "None")
        choices = tuple(c for f in known for c in f[1]) if literal else ()
        return " | ".join(names), choices
    if origin is tuple:
        items = [a for a in typing.get_args(tp) if a is not Ellipsis]
        found = [_type_of(a) for a in items]
        if not items or any(f is None or "tuple" in f[0] for f in found):
            return None
        names = sorted({part for f in found if f is not None for part in f[0].split(" | ")})
        if "int" in names and "float" in names:
            names.remove("int")
        if "None" in names:
            names = [*(n for n in names if n != "None"), "None"]
        return f"tuple[{' | '.join(names)}, ...]", ()
    return None


def _type_of_default(default: Any) -> str | None:
    if default is None:
        return "Any"
    return _SCALARS.get(type(default))  # exactly: an enum member is no run-file value


def _writable(value: Any) -> bool:
    if type(value) is tuple:
        return all(_writable(v) for v in value)
    return type(value) in _SCALARS


def _helps(doc: str | None) -> dict[str, str]:
    """``Args:`` entries of a docstring (Google style, with or without a type in brackets)."""
    helps: dict[str, str] = {}
    current = None
    indent = 0
    for line in inspect.cleandoc(doc or "").splitlines():
        match = _ARG_LINE.match(line)
        depth = len(line) - len(line.lstrip())
        if match and (current is None or depth <= indent):
            current, indent = match.group(1), depth
            helps[current] = match.group(3).strip()
        elif current is not None and line.strip() and depth > indent:
            helps[current] = f"{helps[current]} {line.strip()}".strip()
        elif current is not None:
            current = None
    return {name: _first_sentence(text) for name, text in helps.items()}


def _first_sentence(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    end = re.search(r"(?<=[a-z0-9)`])\. ", text)
    if end:
        text = text[: end.start() + 1]
    if len(text) > _HELP_LENGTH:
        text = text[: _HELP_LENGTH - 3].rstrip() + "..."
    return text


def _summary(cls: type) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "")
    first = doc.split("\n\n")[0].replace("\n", " ").strip()
    return _first_sentence(first) or f"{cls.__name__} from {cls.__module__}"


def _needs_closure(cls: type) -> bool:
    try:
        parameter = inspect.signature(cls.step).parameters.get("closure")  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty


def describe_optimizer(name: str, cls: type, home: str = "") -> Row | None:
    """The table row of optimizer class ``cls`` registered as ``name``; None if not bridged.

    :param home: the module to import it from when that module exports it as ``name``.
    """
    parameters = list(inspect.signature(cls).parameters.values())
    if _needs_closure(cls) or not parameters or parameters[0].name != "params":
        return None
    try:
        init = next(k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__)
        hints = typing.get_type_hints(init)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back on the signature's
        hints = {}
    helps = _helps(cls.__doc__)
    arguments = []
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        required = parameter.default is parameter.empty
        annotation = hints.get(parameter.name, parameter.annotation)
        found = _type_of(annotation) if annotation is not parameter.empty else None
        if found is None and not required:
            written = _type_of_default(parameter.default)
            found = (written, ()) if written is not None else None
        usable = found is not None and (required or _writable(parameter.default))
        if not usable:
            if required:
                return None
            continue
        assert found is not None
        default = REQUIRED if required else parameter.default
        help_text = helps.get(parameter.name, "")
        arguments.append((parameter.name, found[0], default, help_text, found[1]))
    exported = home and getattr(importlib.import_module(home), name, None) is cls
    target = f"{home}:{name}" if exported else f"{cls.__module__}:{cls.__qualname__}"
    return name, target, _summary(cls), tuple(arguments)


def bridged_optimizers(library: Library) -> list[Row]:
    """Every optimizer of ``library`` that the bridge exposes, sorted by name."""
    rows = []
    for name, cls in library.optimizer_classes():
        row = describe_optimizer(name, cls, library.home)
        if row is not None:
            rows.append(row)
    return sorted(rows, key=lambda row: (row[0].lower(), row[0]))


def _installed(library: Library) -> bool:
    try:
        importlib.import_module(library.module)
    except ImportError:
        return False
    return True


def render_table(previous: dict[str, Any] | None = None) -> str:
    """The source of :mod:`plugtrain_bridges.table` for the installed libraries.

    :param previous: the table now written (its ``OPTIMIZERS`` and ``VERSIONS``); a library
        that is not installed keeps its rows from there.
    """
    previous = previous or {}
    lines = [
        '"""GENERATED by ``python -m plugtrain_bridges.generate``: do not edit by hand.',
        "",
        "The optimizers the bridge exposes, per library: name -> (import target, summary,",
        "arguments as (name, type, default, help, choices)). Torch-free; imports nothing.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        "VERSIONS: dict[str, str] = {",
    ]
    versions = dict(previous.get("VERSIONS", {}))
    tables = dict(previous.get("OPTIMIZERS", {}))
    for library in LIBRARIES:
        if _installed(library):
            versions[library.name] = importlib.metadata.version(library.distribution)
            tables[library.name] = {row[0]: row[1:] for row in bridged_optimizers(library)}
    lines += [f"    {key!r}: {versions[key]!r}," for key in sorted(versions)]
    lines += ["}", "", "OPTIMIZERS: dict[str, dict[str, tuple[Any, ...]]] = {"]
    for key in sorted(tables):
        lines.append(f"    {key!r}: {{")
        for name, (target, summary, arguments) in tables[key].items():
            lines.append(f"        {name!r}: (")
            lines.append(f"            {target!r},")
            lines.append(f"            {summary!r},")
            lines.append("            (")
            lines += [f"                {_literal(argument)}," for argument in arguments]
            lines.append("            ),")
            lines.append("        ),")
        lines.append("    },")
    lines += ["}", ""]
    return "\n".join(lines)


def _literal(value: Any) -> str:
    """``repr`` that reads back, non-finite floats included."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if type(value) is tuple:
        inner = ", ".join(_literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def _current() -> dict[str, Any]:
    try:
        from plugtrain_bridges import table
    except Exception:  # noqa: BLE001 - a missing or broken table is what regenerating repairs
        return {}
    return {"VERSIONS": table.VERSIONS, "OPTIMIZERS": table.OPTIMIZERS}


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check``, compare) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the table is out of date")
    options = parser.parse_args(argv)
    text = render_table(_current())
    if options.check:
        same = TABLE.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{TABLE} is out of date: run python -m {__spec__.name}")
        return 0 if same else 1
    TABLE.write_text(text, encoding="utf-8")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
