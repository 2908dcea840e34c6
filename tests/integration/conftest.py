"""Shared fixtures of the integration tests: pip-installing example packages offline."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

# A safety net against a hung pip, not a performance assertion.
PIP_HANG_LIMIT_S = 600


def _version(distribution: str) -> tuple[int, ...] | None:
    """The installed version of a distribution, read from its metadata.

    Never imported or looked up with ``find_spec``: once ``torch.compile`` has imported
    setuptools' distutils in this worker, looking pip up warns (an error under pytest).
    """
    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without plugtrain's variables and PYTHONPATH, plus ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PLUGTRAIN_") and key != "PYTHONPATH"
    }
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def install_offline(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, Sequence[Path]], Path]:
    """``install(label, folders)``: pip-install copies of ``folders`` into a fresh target folder.

    No index, no build isolation, no dependencies (they are this environment's); skips the test
    where pip or setuptools >= 77 (PEP 639 metadata) is missing.
    """

    def install(label: str, folders: Sequence[Path]) -> Path:
        setuptools = _version("setuptools")
        if _version("pip") is None or setuptools is None or setuptools < (77,):
            pytest.skip("pip and setuptools >= 77 are needed to build the packages offline")
        work = tmp_path_factory.mktemp(label)
        ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
        sources = []
        for folder in folders:
            source = work / folder.name
            shutil.copytree(folder, source, ignore=ignore)
            sources.append(str(source))
        target = work / "site"
        command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install"]
        command += ["--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
        command += ["--quiet", "--target", str(target), *sources]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            env=clean_environment(),
            timeout=PIP_HANG_LIMIT_S,
        )
        assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
        return target

    return install
