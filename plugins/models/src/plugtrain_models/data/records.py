"""The records of a local data source: JSON lines, JSON, Parquet and text files.

``setup.data.source`` is a file or a folder; a folder's files of the readable kinds are found
recursively and read in sorted path order. A ``.txt`` file is one record ``{"text": ...}``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from plugtrain.errors import MissingDependencyError, TrainingError

__all__ = ["SUFFIXES", "read_records", "source_files"]

SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".json", ".parquet", ".txt")
"""The kinds of file read (``.json.gz`` holds JSON lines, as in Model Zoo)."""


def source_files(source: str | Path) -> list[Path]:
    """The files of ``source``: itself, or a folder's readable files (recursive, sorted).

    :raises TrainingError: nothing readable there.
    """
    path = Path(source)
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise TrainingError(f"{source}: no {', '.join(SUFFIXES)} files there")
    return files


def _not_utf8(where: str, line: bytes, at: int) -> TrainingError:
    message = (
        f"{where}: not UTF-8 text (byte 0x{line[at : at + 1].hex()} at byte {at + 1} of the "
        "line); convert the file to UTF-8 (iconv -f LATIN1 -t UTF-8, for one)"
    )
    return TrainingError(message)


def _decoded(path: Path, data: bytes) -> str:
    """``data`` as UTF-8, or an error naming the line and byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise _not_utf8(f"{path}:{line}", data[start:], exc.start - start) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The numbered lines of a (gzipped) text file, each decoded as UTF-8."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(f"{path}:{number}", raw, exc.start) from None


def _json_lines(path: Path, skip_errors: bool) -> Iterator[tuple[str, Any]]:
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            yield f"{path}:{number}", json.loads(line)
        except ValueError as exc:
            if not skip_errors:
                message = (
                    f"{path}:{number}: not a JSON record ({exc}); "
                    "UNSAFE_skip_jsonl_decoding_errors: true skips such lines"
                )
                raise TrainingError(message) from None


def _parquet(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        from pyarrow import parquet
    except ImportError as exc:
        raise MissingDependencyError(f"{path}: reading Parquet needs pyarrow") from exc
    for number, row in enumerate(parquet.read_table(path).to_pylist(), start=1):
        yield f"{path}: row {number}", row


def read_records(files: list[Path], skip_errors: bool = False) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of each record of ``files``, in order.

    :raises TrainingError: a line that is not JSON (unless ``skip_errors``), a JSON file that
        holds neither a record nor a list of records, text that is not UTF-8 (its line named).
    """
    for path in files:
        name = path.name
        if name.endswith((".jsonl", ".jsonl.gz", ".json.gz")):
            yield from _json_lines(path, skip_errors)
        elif name.endswith(".json"):
            content = json.loads(_decoded(path, path.read_bytes()))
            items = content if isinstance(content, list) else [content]
            for number, item in enumerate(items):
                yield f"{path}: item {number}", item
        elif name.endswith(".parquet"):
            yield from _parquet(path)
        else:
            yield str(path), {"text": _decoded(path, path.read_bytes())}
