"""Each distribution installs alone with pip, for real, outside the development environment.

The core (with its dependencies) and then each plugin distribution are pip-installed into
temporary target folders from copies of their sources, and run by the base interpreter (not
this virtual environment, so none of the editable installs are visible). That interpreter has
no torch, which also proves that listing, describing and validating never need it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANG_LIMIT_S = 600  # a guard against a hung subprocess, not a performance assertion

pytestmark = pytest.mark.slow

PLUGINS = [
    pytest.param("optimizers", "optimizer", "SGD", id="optimizers"),
    pytest.param("schedulers", "scheduler", "LinearLR", id="schedulers"),
    pytest.param("backends", "backend", "CPU", id="backends"),
    pytest.param("callbacks", "callback", "ComputeNorm", id="callbacks"),
]


def _pip_install(source: Path, target: Path, *options: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-build-isolation",
            "--target",
            str(target),
            *options,
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=HANG_LIMIT_S,
    )
    if done.returncode != 0:
        pytest.skip(f"pip could not install {source.name} here: {done.stderr.strip()[-500:]}")


def _base_python() -> str:
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running inside a virtual environment; no clean base interpreter")
    return getattr(sys, "_base_executable", sys.executable)


@pytest.fixture(scope="session")
def core_alone(tmp_path_factory) -> Path:
    """The core distribution and its dependencies, installed into a folder of their own."""
    work = tmp_path_factory.mktemp("core_alone")
    source = work / "source"
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "core", source / "core", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    target = work / "site"
    _pip_install(source, target)
    return target


def _run(paths: list[Path], *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLUGTRAIN_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in paths)
    return subprocess.run(
        [_base_python(), "-s", *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=paths[0],
        timeout=HANG_LIMIT_S,
    )


def test_the_core_installs_alone_and_names_the_distribution_to_install(core_alone):
    listed = _run([core_alone], "-m", "plugtrain", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {row["provider"] for row in json.loads(listed.stdout)} == {"plugtrain"}
    asked = _run([core_alone], "-c", "import plugtrain; plugtrain.resolve('optimizer', 'SGD')")
    assert asked.returncode == 1
    assert (
        "Unknown optimizer 'SGD'. No installed plugin provides optimizers; "
        "install plugtrain-optimizers (pip install plugtrain-optimizers)."
    ) in asked.stderr
    shown = _run([core_alone], "-m", "plugtrain", "show", "SGD")
    assert shown.returncode == 2  # every unknown name is a usage error
    assert "No component named 'SGD'." in shown.stderr
    assert "'SGD' is an optimizer of plugtrain-optimizers, which is not installed" in shown.stderr
    assert "(pip install plugtrain-optimizers)" in shown.stderr
    assert "Traceback" not in shown.stderr


@pytest.mark.parametrize(("folder", "kind", "name"), PLUGINS)
def test_each_plugin_installs_alone_beside_the_core(core_alone, tmp_path, folder, kind, name):
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "plugins" / folder,
        source,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "tests"),
    )
    target = tmp_path / "site"
    _pip_install(source, target, "--no-deps")  # torch is not needed to list or describe
    if folder == "optimizers":  # the C source of its kernels ships with it, built on first use
        assert (target / "plugtrain_optimizers" / "kernels.c").is_file()
    paths = [target, core_alone]
    listed = _run(paths, "-m", "plugtrain", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    providers = {row["provider"] for row in json.loads(listed.stdout)}
    assert providers == {"plugtrain", f"plugtrain-{folder}"}
    shown = _run(paths, "-m", "plugtrain", "show", name, "--kind", kind)
    assert shown.returncode == 0, shown.stderr
    assert f"{name} ({kind}) from plugtrain-{folder} 0.1.0" in shown.stdout
    others = [p.values for p in PLUGINS if p.values[0] != folder]
    for other_folder, other_kind, other_name in others:
        missing = _run(paths, "-m", "plugtrain", "show", other_name, "--kind", other_kind)
        assert missing.returncode == 2
        assert f"pip install plugtrain-{other_folder}" in missing.stderr, missing.stderr


def test_the_bridges_install_alone_and_name_the_library_to_install(core_alone, tmp_path):
    """Without torch or pytorch-optimizer, plugtrain-bridges registers nothing and says why."""
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "plugins" / "bridges",
        source,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "tests"),
    )
    target = tmp_path / "site"
    _pip_install(source, target, "--no-deps")
    paths = [target, core_alone]
    listed = _run(paths, "-m", "plugtrain", "plugins")
    assert listed.returncode == 0, listed.stderr
    assert "plugtrain-bridges" in listed.stdout
    for name, library in (("ADOPT", "pytorch-optimizer"), ("SparseAdam", "torch")):
        asked = _run(paths, "-c", f"import plugtrain; plugtrain.resolve('optimizer', {name!r})")
        assert asked.returncode == 1
        assert f"Unknown optimizer {name!r}." in asked.stderr
        assert f"(pip install {library})" in asked.stderr
