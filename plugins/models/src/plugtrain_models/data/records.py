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


def _json_lines(path: Path, skip_errors: bool) -> Iterator[tuple[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
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
        holds neither a record nor a list of records.
    """
    for path in files:
        name = path.name
        if name.endswith((".jsonl", ".jsonl.gz", ".json.gz")):
            yield from _json_lines(path, skip_errors)
        elif name.endswith(".json"):
            content = json.loads(path.read_text(encoding="utf-8"))
            items = content if isinstance(content, list) else [content]
            for number, item in enumerate(items):
                yield f"{path}: item {number}", item
        elif name.endswith(".parquet"):
            yield from _parquet(path)
        else:
            yield str(path), {"text": path.read_text(encoding="utf-8")}
