"""Model Zoo's CSV data folders: ``meta.dat`` lists the files, rows are read by index.

``meta.dat`` has one line per file, ``FILENAME COUNT``, relative to the folder; the first
COUNT rows of each file (after its header) are its samples, in that order, and several
folders are pooled in the order given. Each file's rows are located on first use (one pass
over the file, one row per line), so a sample is read without reading the ones before it.
"""

from __future__ import annotations

import ast
import csv
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from plugtrain.errors import TrainingError

__all__ = ["CsvRows", "Row", "read_meta"]

META = "meta.dat"


def read_meta(folder: str, *, fields: int = 2) -> list[tuple[list[str], int]]:
    """The ``(names, count)`` of each line of ``folder``'s ``meta.dat``, paths joined to it.

    :param fields: the words of a line (the last is the count).
    :raises TrainingError: no ``meta.dat``, or a line that is not ``NAME... COUNT``.
    """
    path = os.path.join(folder, META)
    if not os.path.isfile(path):
        raise TrainingError(f"{folder}: the folder has no {META} (lines: FILENAME COUNT)")
    entries = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            words = line.split()
            if not words:
                continue
            if len(words) != fields or not words[-1].isdigit():
                shape = " ".join(["FILENAME"] * (fields - 1) + ["COUNT"])
                raise TrainingError(f"{path}, line {number}: expected {shape}, got {line!r}")
            names = [_beside(folder, name) for name in words[:-1]]
            entries.append((names, int(words[-1])))
    return entries


def _beside(folder: str, name: str) -> str:
    """``name`` relative to ``folder`` (as written when it is absolute or found only there)."""
    joined = os.path.join(folder, name)
    return joined if os.path.exists(joined) or not os.path.exists(name) else name


class Row:
    """One CSV sample: its values by column, and where it was read (for errors)."""

    def __init__(self, values: dict[str, str], path: str, number: int) -> None:
        self.values, self.path, self.number = values, path, number

    def where(self) -> str:
        """``FILE, row N`` (N counts the samples from 1, the header left out)."""
        return f"{self.path}, row {self.number}"

    def field(self, name: str) -> str:
        """Column ``name``.

        :raises TrainingError: the file has no such column.
        """
        if name not in self.values:
            columns = ", ".join(self.values)
            raise TrainingError(f"{self.where()}: no column {name!r} (columns: {columns})")
        return self.values[name]

    def literal(self, name: str) -> Any:
        """Column ``name`` as the Python literal it holds (a list of tokens or ids).

        :raises TrainingError: the column is missing or is not a literal.
        """
        text = self.field(name)
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            message = f"{self.where()}: column {name!r} is not a list literal: {text[:80]!r}"
            raise TrainingError(message) from None

    def ints(self, name: str) -> np.ndarray:
        """Column ``name`` as a list literal of integers, int32."""
        value = self.literal(name)
        if isinstance(value, int):
            value = [value]
        try:
            return np.asarray(value, dtype=np.int32).reshape(-1)
        except (TypeError, ValueError):
            message = f"{self.where()}: column {name!r} is not a list of integers"
            raise TrainingError(message) from None


class CsvRows:
    """The samples of the CSV files the ``meta.dat`` of ``folders`` list, by global index."""

    def __init__(self, folders: Sequence[str]) -> None:
        self.files: list[tuple[str, int]] = []
        for folder in folders:
            for (path,), count in read_meta(folder):
                if not os.path.isfile(path):
                    raise TrainingError(f"{folder}/{META} lists {path}, which does not exist")
                self.files.append((path, count))
        if not self.files:
            raise TrainingError(f"{', '.join(folders)}: {META} lists no file")
        self.starts = np.cumsum([0] + [count for _, count in self.files])
        self._index: dict[int, tuple[list[str], np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _locate(self, file: int) -> tuple[list[str], np.ndarray]:
        """The header and the byte offset of each sample's line of file ``file``."""
        if file not in self._index:
            path, count = self.files[file]
            with open(path, "rb") as handle:
                header_line = handle.readline().decode("utf-8")
                header = next(csv.reader([header_line]), [])
                offsets = []
                while len(offsets) < count:
                    offset = handle.tell()
                    if not handle.readline():
                        break
                    offsets.append(offset)
            if len(offsets) < count:
                message = f"{path}: meta.dat counts {count} rows, the file has {len(offsets)}"
                raise TrainingError(message)
            self._index[file] = (header, np.asarray(offsets, dtype=np.int64))
        return self._index[file]

    def row(self, index: int) -> Row:
        """Sample ``index`` (global, in file order)."""
        file = int(np.searchsorted(self.starts, index, side="right")) - 1
        local = index - int(self.starts[file])
        header, offsets = self._locate(file)
        path = self.files[file][0]
        with open(path, "rb") as handle:
            handle.seek(int(offsets[local]))
            line = handle.readline().decode("utf-8")
        try:
            values = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            values = []
        if len(values) != len(header):
            message = (
                f"{path}, row {local + 1}: {len(values)} fields for the header's "
                f"{len(header)} ({', '.join(header)})"
            )
            raise TrainingError(message)
        return Row(dict(zip(header, values, strict=True)), path, local + 1)
