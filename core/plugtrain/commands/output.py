"""Writing a command's text: to stdout or to the file of ``-o``, and as aligned columns."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from plugtrain.commands import EXIT_OK

__all__ = ["print_table", "write"]


def write(text: str, output: str | None, out: TextIO) -> int:
    """Print ``text``, or write it to the file ``output``."""
    if output is None:
        out.write(text)
        return EXIT_OK
    Path(output).write_text(text, encoding="utf-8")
    out.write(f"wrote {output}\n")
    return EXIT_OK


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    """Left-aligned columns two blanks apart; the last column is not padded."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (header, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=False)]
        out.write("  ".join([*cells, row[-1]]).rstrip() + "\n")
