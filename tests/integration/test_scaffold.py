"""``plugtrain new`` for real: each kind's package is pip-installed into a virtual environment,
passes its own tests there, and ``plugtrain check`` accepts its example run file.

The environment is a real venv whose ``site-packages`` also reads this environment's (a ``.pth``
line calling ``site.addsitedir``), so torch and plugtrain come from here while the generated
package is built and installed by pip (offline, no build isolation: this environment's
setuptools), exactly as ``pip install .`` would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from plugtrain.authoring.scaffold import SCAFFOLD_KINDS

pytestmark = pytest.mark.slow

HANG_LIMIT_S = 600  # a safety net against a hung subprocess, not a performance assertion
NAMES = {
    "optimizer": "Prodigy",
    "scheduler": "WarmupLR",
    "callback": "StepCounter",
    "logger": "JsonLines",
    "backend": "Threads",
    "model": "TinyNet",
    "dataloader": "Blobs",
    "sparsity": "MagnitudePrune",
}


def _environment() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_") and k != "PYTHONPATH"
    }


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=_environment(),
        timeout=HANG_LIMIT_S,
    )


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv seeing this environment's packages; returns its python."""
    where = tmp_path_factory.mktemp("scaffold-venv") / "venv"
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], where
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    Path(purelib, "_outer_environment.pth").write_text(
        f"import site; site.addsitedir({ours!r})\n", encoding="utf-8"
    )
    return python


@pytest.fixture(scope="module")
def installed(environment: Path, tmp_path_factory: pytest.TempPathFactory):
    """``installed(kind)``: the folder of that kind's package, written and pip-installed once."""
    done: dict[str, Path] = {}

    def install(kind: str) -> Path:
        if kind in done:
            return done[kind]
        folder = tmp_path_factory.mktemp(f"new-{kind}") / f"acme-plugtrain-{kind}"
        name = NAMES[kind]
        new = _run(
            [
                sys.executable,
                "-m",
                "plugtrain",
                "new",
                kind,
                name,
                "--dir",
                str(folder),
                "--package",
                f"acme-plugtrain-{kind}",
            ],
            folder.parent,
        )
        assert new.returncode == 0, new.stderr
        pip = [sys.executable, "-m", "pip", "--python", str(environment), "install", "--quiet"]
        pip += ["--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check"]
        result = _run([*pip, str(folder)], folder)
        assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
        done[kind] = folder
        return folder

    return install


@pytest.mark.parametrize("kind", SCAFFOLD_KINDS)
def test_the_generated_package_passes_its_own_tests(kind, installed, environment):
    folder = installed(kind)
    # run from the package folder: its own conftest.py and pyproject's pytest settings
    result = _run([str(environment), "-m", "pytest", "-q", "-p", "no:cacheprovider"], folder)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    assert "skipped" not in result.stdout


@pytest.mark.parametrize("kind", SCAFFOLD_KINDS)
def test_plugtrain_check_accepts_the_example_run_file(kind, installed, environment):
    folder = installed(kind)
    result = _run([str(environment), "-m", "plugtrain", "check", "examples/run.yaml"], folder)
    assert result.returncode == 0, result.stderr
    assert "examples/run.yaml: OK (1 trainer)" in result.stdout


def test_the_package_is_what_pip_installed(installed, environment):
    folder = installed("optimizer")
    where = _run(
        [str(environment), "-c", "import acme_plugtrain_optimizer as m; print(m.__file__)"], folder
    )
    assert "site-packages" in where.stdout
    assert str(folder) not in where.stdout
    listed = _run([str(environment), "-m", "plugtrain", "list", "optimizer"], folder)
    assert re.search(r"Prodigy +optimizer +acme-plugtrain-optimizer +0\.1\.0", listed.stdout)
