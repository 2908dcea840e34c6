"""P17 (round 4, case 6): a plugin that prints a banner at import keeps machine-read output clean.

The plugin is a real distribution, built and installed with pip (offline, ``--target`` a
temporary folder put on ``PYTHONPATH``), whose modules write a banner at import in every way a
library does: ``print`` (``sys.stdout``), ``os.write`` on file descriptor 1, and a child
process that inherits descriptor 1. Its plugin module is imported while plugins load and its
schema module later, when the listing reads the summaries. ``--json`` and ``-o`` output must
still be exactly the command's; the banners go to stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.offline_install import clean_environment, offline_build_problem
from support.plugtrain_cli import run_plugtrain

pytestmark = pytest.mark.slow  # pip installs a distribution, then runs plugtrain

# A safety net against a hung pip, not a performance assertion.
PIP_HANG_LIMIT_S = 600

BANNER = textwrap.dedent(
    """\
    import os
    import subprocess
    import sys

    print("{who}: print banner")
    os.write(1, b"{who}: fd 1 banner\\n")
    subprocess.run([sys.executable, "-c", "print('{who}: child banner')"], check=True)
    """
)

FILES = {
    "pyproject.toml": """\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "loud-plugtrain-plugin"
        version = "0.3.0"

        [project.entry-points.plugtrain]
        loud = "loud_plugin.plugin"

        [tool.setuptools]
        packages = ["loud_plugin"]
        """,
    "loud_plugin/__init__.py": "",
    "loud_plugin/plugin.py": BANNER.format(who="loud plugin")
    + textwrap.dedent(
        """\
        from plugtrain import hookimpl


        @hookimpl
        def plugtrain_register_optimizers(registry):
            registry.register(
                "LoudSGD", "torch.optim:SGD", schema="loud_plugin.schemas:LoudSGDArgs"
            )
        """
    ),
    "loud_plugin/schemas.py": BANNER.format(who="loud schemas")
    + textwrap.dedent(
        """\
        import attrs

        from plugtrain.schema import arg


        @attrs.frozen
        class LoudSGDArgs:
            \"\"\"SGD from a plugin that talks at import.\"\"\"

            lr: float = arg(0.1, help="learning rate", ge=0)
        """
    ),
}


@pytest.fixture(scope="module")
def loud_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder into which pip installed ``loud-plugtrain-plugin``."""
    problem = offline_build_problem()
    if problem is not None:
        pytest.skip(f"cannot build the plugin offline: {problem}")
    work = tmp_path_factory.mktemp("loud")
    source = work / "loud-plugtrain-plugin"
    for name, text in FILES.items():
        path = source / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    site = work / "site"
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--quiet"]
    command += ["--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
    done = subprocess.run(
        [*command, "--target", str(site), str(source)],
        capture_output=True,
        text=True,
        check=False,
        env=clean_environment(),
        timeout=PIP_HANG_LIMIT_S,
    )
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    return site


def _run(site: Path, cache: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = clean_environment(PYTHONPATH=str(site), PLUGTRAIN_CACHE_DIR=str(cache), **extra)
    return run_plugtrain(*args, env=env)


def _assert_banners_on_stderr(stderr: str, *who: str) -> None:
    for name in who:
        for way in ("print", "fd 1", "child"):
            assert f"{name}: {way} banner" in stderr, stderr


def test_p17_list_json_stays_json_while_the_plugin_prints(loud_site, tmp_path):
    done = _run(loud_site, tmp_path / "cache", "list", "--json", PLUGTRAIN_NO_CACHE="1")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)  # nothing but the listing on stdout
    loud = [r for r in rows if r["name"] == "LoudSGD"]
    assert loud == [
        {
            "name": "LoudSGD",
            "kind": "optimizer",
            "aliases": [],
            "provider": "loud-plugtrain-plugin",
            "version": "0.3.0",
            "plugin": "loud",
            "summary": "SGD from a plugin that talks at import.",
        }
    ]
    _assert_banners_on_stderr(done.stderr, "loud plugin", "loud schemas")


def test_p17_the_cached_listing_equals_the_loaded_one(loud_site, tmp_path):
    cache = tmp_path / "cache"
    first = _run(loud_site, cache, "list", "--json")
    assert first.returncode == 0, first.stderr
    _assert_banners_on_stderr(first.stderr, "loud plugin", "loud schemas")
    again = _run(loud_site, cache, "list", "--json")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert "banner" not in again.stderr  # from the cache: no plugin was imported


def test_p17_list_output_file_holds_only_the_listing(loud_site, tmp_path):
    target = tmp_path / "listing.txt"
    done = _run(loud_site, tmp_path / "cache", "list", "optimizer", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {target}\n"
    text = target.read_text(encoding="utf-8")
    assert "banner" not in text
    assert text.startswith("NAME ")
    assert any(line.startswith("LoudSGD ") for line in text.splitlines())


@pytest.mark.parametrize(
    "command", [("show", "LoudSGD", "--json"), ("plugins", "--json")], ids=["show", "plugins"]
)
def test_p17_show_and_plugins_json_stay_json(loud_site, tmp_path, command):
    done = _run(loud_site, tmp_path / "cache", *command)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    names = [item["name"] for item in found]
    assert ("LoudSGD" if command[0] == "show" else "loud") in names
    _assert_banners_on_stderr(done.stderr, "loud plugin")
