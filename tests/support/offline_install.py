"""Building the example packages offline with this environment's pip and setuptools."""

from __future__ import annotations

import importlib.metadata
import os
import re
from pathlib import Path


def version_of(distribution: str) -> tuple[int, ...] | None:
    """The installed version of a distribution (major, minor), read from its metadata.

    Never imported or looked up with ``find_spec``: once ``torch.compile`` has imported
    setuptools' distutils in this worker, looking pip up warns (an error under pytest).
    """
    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def offline_build_problem() -> str | None:
    """Why pip cannot build the example packages here without an index, or ``None``.

    Setuptools 61 brought PEP 621 metadata; before 70.1 it builds wheels only with ``wheel``.
    """
    if version_of("pip") is None:
        return "pip is not installed in this environment"
    setuptools = version_of("setuptools")
    if setuptools is None:
        return "setuptools is not installed, so the example cannot be built without an index"
    shown = ".".join(map(str, setuptools))
    if setuptools < (61,):
        return f"setuptools {shown} predates PEP 621 metadata (needs >= 61)"
    if setuptools < (70, 1) and version_of("wheel") is None:
        return f"setuptools {shown} needs the 'wheel' package to build wheels"
    return None


def fit_to_setuptools(source: Path) -> None:
    """Before setuptools 77 (PEP 639), write a copied package's license expression as a table."""
    setuptools = version_of("setuptools")
    if setuptools is None or setuptools >= (77,):
        return
    pyproject = source / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    text = text.replace('license = "MIT"', 'license = { text = "MIT" }')
    text = text.replace('requires = ["setuptools>=77"]', 'requires = ["setuptools>=61"]')
    pyproject.write_text(text, encoding="utf-8")


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without plugtrain's variables and PYTHONPATH, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PLUGTRAIN_") and key != "PYTHONPATH"
    }
    env.update(extra)
    return env
