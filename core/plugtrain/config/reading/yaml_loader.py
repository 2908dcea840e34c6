"""A safe YAML loader that remembers where every value came from.

Mappings load as :class:`LocatedDict` and sequences as :class:`LocatedList`; both know the
``file:line:column`` of themselves, of each key and of each value, so that configuration errors
can point at the offending text. The loader rejects duplicate keys, every non-standard tag
(``!!python/...`` included), alias expansion beyond a size limit (billion-laughs files), aliases
that form a cycle, files that are too large, too deeply nested or not UTF-8, and control
characters; each with a position. Keys merged with ``<<: *anchor`` may be overridden.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from plugtrain.errors import ConfigError, ConfigIssue

__all__ = ["LocatedDict", "LocatedList", "load_yaml", "location_of"]

# Run files are small; these bounds keep a hostile file's rejection within a second or two of
# pure-Python parsing (8 MiB of dense YAML once took a minute to reject).
MAX_FILE_BYTES = 1024 * 1024
MAX_EXPANDED_NODES = 20_000
MAX_DEPTH = 200


class Mark:
    """A position in a file: 0-based line and column, shown 1-based."""

    __slots__ = ("column", "line", "source")

    def __init__(self, source: str, line: int, column: int) -> None:
        self.source = source
        self.line = line
        self.column = column

    def __str__(self) -> str:
        return f"{self.source}:{self.line + 1}:{self.column + 1}"


class LocatedDict(dict):  # type: ignore[type-arg]
    """A ``dict`` from YAML that knows where it, its keys and its values are."""

    mark: Mark | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_marks: dict[Any, Mark] = {}
        self.value_marks: dict[Any, Mark] = {}


class LocatedList(list):  # type: ignore[type-arg]
    """A ``list`` from YAML that knows where it and its items are."""

    mark: Mark | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_marks: list[Mark] = []


def location_of(container: Any, key: Any = None, *, of_key: bool = False) -> str | None:
    """``file:line:column`` of ``container[key]`` (or of the key itself), else of the container."""
    if isinstance(container, LocatedDict) and key is not None:
        marks = container.key_marks if of_key else container.value_marks
        if key in marks:
            return str(marks[key])
    if (
        isinstance(container, LocatedList)
        and isinstance(key, int)
        and 0 <= key < len(container.item_marks)
    ):
        return str(container.item_marks[key])
    mark = getattr(container, "mark", None)
    return str(mark) if mark is not None else None


def _mark(source: str, yaml_mark: Any) -> Mark:
    return Mark(source, yaml_mark.line, yaml_mark.column)


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, counting values and nesting while it composes the document."""

    source = "<string>"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.composed = 0
        self.depth = 0
        self.open_anchors: list[str] = []

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Compose one node, refusing huge, deep or self-containing documents early."""
        event = self.peek_event()  # type: ignore[no-untyped-call]
        where = str(_mark(self.source, event.start_mark))
        self.composed += 1
        if self.composed > MAX_EXPANDED_NODES:
            message = f"the file holds more than {MAX_EXPANDED_NODES} values; a run file is smaller"
            raise ConfigError([ConfigIssue("", message, where)])
        if self.depth > MAX_DEPTH:
            message = f"nesting deeper than {MAX_DEPTH} levels"
            raise ConfigError([ConfigIssue("", message, where)])
        anchor = getattr(event, "anchor", None)
        if isinstance(event, yaml.AliasEvent):
            if anchor in self.open_anchors:
                message = f"alias *{anchor} refers to a value that contains it (a cycle)"
                raise ConfigError([ConfigIssue("", message, where)])
            return super().compose_node(parent, index)
        self.depth += 1
        if anchor is not None:
            self.open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            if anchor is not None:
                self.open_anchors.pop()


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Any:
    data = LocatedDict()
    data.mark = _mark(loader.source, node.start_mark)
    yield data
    explicit = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
    loader.flatten_mapping(node)
    merged = len(node.value) - explicit  # flatten_mapping puts merged pairs (<<) first
    written: set[Any] = set()  # keys written in this mapping; merged ones may be overridden
    for index, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        where = _mark(loader.source, key_node.start_mark)
        try:
            hash(key)
        except TypeError:
            raise ConfigError(
                [ConfigIssue("", "mapping keys must be scalars", str(where))]
            ) from None
        if index >= merged:
            if key in written:
                first = data.key_marks[key]
                message = f"duplicate key {key!r} (first defined at line {first.line + 1})"
                raise ConfigError([ConfigIssue("", message, str(where))])
            written.add(key)
        data[key] = loader.construct_object(value_node, deep=True)
        data.key_marks[key] = where
        data.value_marks[key] = _mark(loader.source, value_node.start_mark)


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> Any:
    data = LocatedList()
    data.mark = _mark(loader.source, node.start_mark)
    yield data
    for item in node.value:
        data.append(loader.construct_object(item, deep=True))
        data.item_marks.append(_mark(loader.source, item.start_mark))


# YAML 1.2's float rule: ``6e-06``, ``2e-4`` and ``1E3`` are floats (YAML 1.1, PyYAML's default,
# reads a float without a dot as a string). Model Zoo run files write learning rates this way.
_FLOAT_1_2 = re.compile(
    r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)
_INT_1_2 = re.compile(r"^[-+]?[0-9]+$")


def _float_resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """PyYAML's implicit resolvers with its float rule replaced by YAML 1.2's."""
    resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        resolvers[first] = [(tag, rx) for tag, rx in entries if tag != "tag:yaml.org,2002:float"]
    for first in "-+.0123456789":
        resolvers.setdefault(first, []).append(("tag:yaml.org,2002:float", _FLOAT_1_2))
    return resolvers


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> Any:
    text = str(loader.construct_scalar(node))
    if _INT_1_2.match(text):  # an int resolved first never gets here; keep the type exact
        return int(text)
    return yaml.SafeLoader.construct_yaml_float(loader, node)


_Loader.yaml_implicit_resolvers = _float_resolvers()
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def _check_size(node: yaml.Node, source: str) -> None:
    """Reject alias bombs and absurd nesting before anything is constructed."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 0, False)]
    while stack:
        current, depth, children_done = stack.pop()
        if id(current) in sizes and not children_done:
            continue
        if depth > MAX_DEPTH:
            message = f"nesting deeper than {MAX_DEPTH} levels"
            raise ConfigError([ConfigIssue("", message, str(_mark(source, current.start_mark)))])
        children = _children(current)
        if children_done:
            sizes[id(current)] = 1 + sum(sizes.get(id(c), 1) for c in children)
            if sizes[id(current)] > MAX_EXPANDED_NODES:
                message = (
                    f"the document expands to more than {MAX_EXPANDED_NODES} values "
                    "(aliases repeated too often)"
                )
                where = str(_mark(source, current.start_mark))
                raise ConfigError([ConfigIssue("", message, where)])
            continue
        sizes.setdefault(id(current), 1)
        stack.append((current, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(text: str | bytes, source: str = "<string>") -> Any:
    """Parse one YAML document safely, keeping positions.

    :param text: the document (bytes must be UTF-8).
    :param source: the file name used in positions.
    :raises ConfigError: with ``file:line:column`` for any problem.
    """
    if isinstance(text, bytes):
        if len(text) > MAX_FILE_BYTES:
            message = f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
            raise ConfigError([ConfigIssue("", message, source)])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raw: bytes = exc.object
            line = raw[: exc.start].count(b"\n") + 1
            column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
            message = f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})"
            raise ConfigError([ConfigIssue("", message, f"{source}:{line}:{column}")]) from None
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:
        raise ConfigError([_reader_issue(exc, text, source)]) from None
    loader.source = source
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = str(_mark(source, mark)) if mark is not None else source
        problem = exc.problem or exc.context or "invalid YAML"
        if isinstance(exc, yaml.constructor.ConstructorError) and "tag" in (exc.problem or ""):
            problem = f"{problem}; only plain YAML is accepted (no tags such as !!python/...)"
        raise ConfigError([ConfigIssue("", problem, where)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue("", f"invalid YAML: {exc}", source)]) from None
    except RecursionError:
        message = "nesting too deep to read"
        raise ConfigError([ConfigIssue("", message, source)]) from None
    finally:
        loader.dispose()


def _reader_issue(exc: yaml.reader.ReaderError, text: str, source: str) -> ConfigIssue:
    """A character YAML does not allow (a control character), with its line and column."""
    position = exc.position if isinstance(exc.position, int) else 0
    line = text.count("\n", 0, position) + 1
    column = position - (text.rfind("\n", 0, position) + 1) + 1
    character = exc.character if isinstance(exc.character, int) else 0
    message = f"character U+{character:04X} is not allowed in YAML (control character)"
    return ConfigIssue("", message, f"{source}:{line}:{column}")


def read_yaml_file(path: str | os.PathLike[str]) -> Any:
    """Read and parse a YAML file, with clear errors for missing files and directories."""
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise ConfigError([ConfigIssue("", "no such file", source)])
    if path.is_dir():
        raise ConfigError([ConfigIssue("", "is a directory, not a run file", source)])
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            message = f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
            raise ConfigError([ConfigIssue("", message, source)])
        with path.open("rb") as handle:  # bounded: /dev/zero or a pipe is not read forever
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError([ConfigIssue("", f"cannot read: {exc.strerror}", source)]) from None
    return load_yaml(data, source)
