"""Shared fixtures of the integration tests: pip-installing example packages offline.

The build checks are in ``support.offline_install``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from support.offline_install import clean_environment, fit_to_setuptools, offline_build_problem

# A safety net against a hung pip, not a performance assertion.
PIP_HANG_LIMIT_S = 600


@pytest.fixture(scope="session")
def install_offline(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, Sequence[Path]], Path]:
    """``install(label, folders)``: pip-install copies of ``folders`` into a fresh target folder.

    No index, no build isolation, no dependencies (they are this environment's); the copies are
    fitted to setuptools 61-76 (:func:`fit_to_setuptools`). Skips the test where this
    environment cannot build them (:func:`offline_build_problem`).
    """

    def install(label: str, folders: Sequence[Path]) -> Path:
        problem = offline_build_problem()
        if problem is not None:
            pytest.skip(f"cannot build the packages offline: {problem}")
        work = tmp_path_factory.mktemp(label)
        ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info", ".pytest_cache")
        sources = []
        for folder in folders:
            source = work / folder.name
            shutil.copytree(folder, source, ignore=ignore)
            fit_to_setuptools(source)
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
