"""``python -m plugtrain``: the same as the ``plugtrain`` command."""

from __future__ import annotations

import sys

from plugtrain.cli import main

if __name__ == "__main__":
    sys.exit(main())
