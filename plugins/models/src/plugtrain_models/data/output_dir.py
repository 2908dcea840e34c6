"""The output folder of ``plugtrain preprocess``: fresh, and gone again when a run fails."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from plugtrain.errors import TrainingError

__all__ = ["fresh_output_dir"]


@contextmanager
def fresh_output_dir(output: Path) -> Iterator[Path]:
    """Create ``output`` (with missing parents) for the run inside the ``with`` block.

    When the block fails, the folders it created are removed, and in a folder that existed
    the files it added; nothing half-written is left behind.

    :raises TrainingError: ``output`` already holds ``.h5`` files, or is a file.
    """
    if output.is_file():
        raise TrainingError(f"{output}: is a file; give a folder to write")
    stale = sorted(output.glob("*.h5")) if output.is_dir() else []
    if stale:
        message = f"{output} already holds .h5 files ({stale[0].name}...); give an empty folder"
        raise TrainingError(message)
    top = output
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    created = not output.exists()
    before = set() if created else {p.name for p in output.iterdir()}
    output.mkdir(parents=True, exist_ok=True)
    try:
        yield output
    except BaseException:
        if created:
            shutil.rmtree(top, ignore_errors=True)
        else:
            for path in output.iterdir():
                if path.name not in before and path.is_file():
                    path.unlink()
        raise
