"""Where the repository, the tests and their data are, wherever a test module lives."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
DATA = TESTS / "data"
EXAMPLES = REPO / "examples"
