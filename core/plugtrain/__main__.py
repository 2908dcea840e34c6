"""``python -m plugtrain``: the same as the ``plugtrain`` command.

Python puts the current folder first on ``sys.path`` for ``-m``; it is dropped here, so that
both entry points find plugin modules the same way (``PYTHONPATH`` and installed packages; never
the current folder implicitly, where a downloaded run file may sit next to a ``helper.py``).
"""

from __future__ import annotations

import os
import sys

from plugtrain.cli import main


def _drop_current_folder() -> None:
    """Remove the current folder ``-m`` put at ``sys.path[0]`` (``-P`` already leaves it out)."""
    if getattr(sys.flags, "safe_path", False) or not sys.path:  # -P (Python 3.11+)
        return
    first = sys.path[0]
    if first in ("", os.curdir) or os.path.abspath(first) == os.getcwd():
        del sys.path[0]


if __name__ == "__main__":
    _drop_current_folder()
    sys.exit(main())
