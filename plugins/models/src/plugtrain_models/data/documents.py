"""The documents ``plugtrain preprocess`` reads: text files, JSON lines, the stdlib corpus."""

from __future__ import annotations

import gzip
import json
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

from plugtrain.errors import TrainingError

__all__ = ["STDLIB", "SUFFIXES", "documents", "input_files", "stdlib_documents"]

STDLIB = "stdlib"
"""The input naming the built-in standard-library corpus."""

SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")
"""The files read inside a folder given as input."""


def input_files(inputs: Sequence[str]) -> list[Path]:
    """Each input file, folders expanded to their readable files (sorted, not recursive).

    :raises TrainingError: an input does not exist or has another suffix.
    """
    found: list[Path] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.name.endswith(SUFFIXES)))
        elif path.is_file():
            if not path.name.endswith(SUFFIXES):
                message = f"{path}: not a {', '.join(SUFFIXES)} file"
                raise TrainingError(message)
            found.append(path)
        else:
            raise TrainingError(f"{path}: no such file or folder")
    return found


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as stream:
        yield from stream


def documents(path: Path, text_key: str = "text") -> Iterator[str]:
    """The documents of one file.

    A ``.txt`` file holds one document per line (the line ending removed, blank lines
    skipped); a JSON lines file one record per line, its document under ``text_key``.
    """
    json_lines = not path.name.endswith(".txt")
    for number, line in enumerate(_lines(path), start=1):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        if not json_lines:
            yield text
            continue
        record = json.loads(text)
        value = record.get(text_key) if isinstance(record, dict) else None
        if not isinstance(value, str):
            message = f"{path}:{number}: no string field {text_key!r} (--text-key)"
            raise TrainingError(message)
        if value.strip():
            yield value


def stdlib_documents(max_bytes: int) -> Iterator[str]:
    """The standard-library corpus, one document per module file, up to ``max_bytes`` bytes.

    The same files as the built-in ``StdlibText`` data (the running Python's top-level
    ``*.py`` modules in name order); the last document is cut at the byte budget.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    left = max_bytes
    for path in sorted(stdlib.glob("*.py"), key=lambda p: p.name):
        if left <= 0:
            return
        data = path.read_bytes()[:left]
        left -= len(data)
        yield data.decode("utf-8", errors="ignore")
