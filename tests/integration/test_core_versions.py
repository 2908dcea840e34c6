"""A plugin's tests run against the oldest and the newest core it allows, for real.

``python -m plugtrain.authoring.core_versions`` installs the core, built from a copy of this
repository (the only release there is: plugtrain 0.1.0, so here the oldest core a plugin may
require and the newest are the same source), into a folder of its own with pip, and runs a small
plugin's pytest suite with that core first on ``PYTHONPATH``. The plugin is installed with pip
into another folder; nothing is mocked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import plugtrain
from plugtrain.discovery.compat import FIRST_RELEASE, core_requirement

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HANG_LIMIT_S = 600  # a safety net against a hung subprocess, not a performance assertion

PLUGIN_FILES = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "acme-plugtrain-range"
        version = "0.1.0"
        requires-python = ">=3.10"
        dependencies = ["{requirement}"]

        [project.entry-points.plugtrain]
        range = "acme_plugtrain_range.plugin"

        [project.entry-points."plugtrain.api"]
        "1.0" = "acme_plugtrain_range.plugin"
        """,
    "src/acme_plugtrain_range/__init__.py": '"""A plugin whose tests run on two cores."""\n',
    "src/acme_plugtrain_range/plugin.py": """\
        import attrs

        from plugtrain import hookimpl
        from plugtrain.schema import arg


        @attrs.frozen
        class RepeatArgs:
            \"\"\"The same batch, again and again.\"\"\"

            times: int = arg(3, gt=0)


        @hookimpl
        def plugtrain_register_dataloaders(registry):
            registry.register("Repeat", "acme_plugtrain_range.data:repeat", schema=RepeatArgs)
        """,
    "src/acme_plugtrain_range/data.py": """\
        def repeat(times=3):
            return [(1.0, 1.0)] * times
        """,
    "tests/test_plugin.py": """\
        import os

        import plugtrain
        from plugtrain.testing import assert_plugin_contract, assert_plugin_installed


        def test_installed(installed_registry):
            assert_plugin_installed("acme-plugtrain-range", installed_registry)


        def test_contract(installed_registry):
            assert_plugin_contract("acme-plugtrain-range", installed_registry)


        def test_the_core_is_the_one_installed_for_this_run():
            assert plugtrain.__file__.startswith(os.environ["EXPECTED_CORE"])
        """,
}


def _write_plugin(root: Path, requirement: str) -> Path:
    for name, text in PLUGIN_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).replace("{requirement}", requirement))
    return root


def _core_source(destination: Path) -> Path:
    """A copy of the core distribution's sources (setup.cfg, README, core/), nothing else."""
    destination.mkdir()
    for name in ("setup.cfg", "README.md", "pyproject.toml"):
        shutil.copy(REPO / name, destination / name)
    shutil.copytree(
        REPO / "core",
        destination / "core",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
    )
    return destination


def _pip_install(source: Path, target: Path) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    command += ["--no-build-isolation", "--target", str(target), str(source)]
    subprocess.run(command, check=True, timeout=HANG_LIMIT_S, capture_output=True)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("core_versions")
    plugin = _write_plugin(root / "plugin", core_requirement(plugtrain.PLUGIN_API_VERSION))
    installed = root / "plugin-site"
    _pip_install(plugin, installed)
    return {
        "root": root,
        "plugin": plugin,
        "plugin_site": installed,
        "core": _core_source(root / "core"),
    }


def _core_versions(sources: dict[str, Path], which: str, target: Path, project: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    env["PYTHONPATH"] = str(sources["plugin_site"])
    env["EXPECTED_CORE"] = str(target)
    command = [sys.executable, "-m", "plugtrain.authoring.core_versions", which]
    command += ["--project", str(project), "--core", str(sources["core"])]
    command += ["--target", str(target), "--pip-option=--no-build-isolation", "--"]
    command += [sys.executable, "-m", "pytest", "-p", "plugtrain.testing", "-p", "no:cacheprovider"]
    command += [str(sources["plugin"] / "tests")]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=sources["plugin"],
        timeout=HANG_LIMIT_S,
        check=False,
    )


@pytest.mark.parametrize("which", ["oldest", "newest"])
def test_a_plugins_tests_run_against_the_core_at_each_end_of_its_range(sources, which, tmp_path):
    target = tmp_path / "core-site"
    done = _core_versions(sources, which, target, sources["plugin"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"running against plugtrain {plugtrain.__version__} from {target}" in done.stderr
    assert re.search(rf"plugtrain {re.escape(plugtrain.__version__)} .*from {target}", done.stdout)
    assert "3 passed" in done.stdout


def test_a_core_older_than_the_oldest_allowed_is_refused(sources, tmp_path):
    project = _write_plugin(tmp_path / "newer", "plugtrain>=99.0")
    done = _core_versions(sources, "oldest", tmp_path / "core-site", project)
    assert done.returncode == 2
    assert f"the core installed is plugtrain {plugtrain.__version__}, outside" in done.stderr


def test_the_rule_covers_the_api_this_core_provides():
    assert plugtrain.PLUGIN_API_VERSION in FIRST_RELEASE
    assert core_requirement(plugtrain.PLUGIN_API_VERSION) == (
        f"plugtrain>={FIRST_RELEASE[plugtrain.PLUGIN_API_VERSION]}"
    )
