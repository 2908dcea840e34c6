"""Plugin API compatibility: declared in the metadata, checked before the plugin is imported.

The end-to-end tests put real ``*.dist-info`` folders on the ``PYTHONPATH`` of a subprocess, so
that ``importlib.metadata`` finds them exactly as it finds installed distributions; each plugin
module records its own import in a file, which shows whether plugtrain imported it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO

import plugtrain
from plugtrain.discovery.compat import (
    API_GROUP,
    compatible,
    declared_api,
    incompatibility,
    parse_api_version,
    supported_range,
)

# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 300

PLUGIN_MODULE = '''
"""A test plugin that records being imported."""
import os
from pathlib import Path

import plugtrain

Path(os.environ["IMPORT_LOG"], __name__.split(".")[0]).write_text("imported")


@plugtrain.hookimpl
def plugtrain_register_models(registry):
    import attrs

    @attrs.frozen
    class Args:
        """A model from {name}."""

    registry.register("{model}", "{name}.plugin:Model", schema=Args)
'''


def make_distribution(site: Path, name: str, api: list[str] | None, version: str = "0.3") -> None:
    """Write ``name`` (package and dist-info) into ``site``; ``api`` is its declaration."""
    package = site / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    model = "".join(part.capitalize() for part in name.split("_"))
    (package / "plugin.py").write_text(
        PLUGIN_MODULE.replace("{name}", name).replace("{model}", model), encoding="utf-8"
    )
    dist_info = site / f"{name}-{version}.dist-info"
    dist_info.mkdir()
    dist_name = name.replace("_", "-")
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n", encoding="utf-8"
    )
    entry_points = f"[plugtrain]\n{name} = {name}.plugin\n"
    if api is not None:
        entry_points += f"\n[{API_GROUP}]\n" + "".join(f"{v} = {name}.plugin\n" for v in api)
    (dist_info / "entry_points.txt").write_text(entry_points, encoding="utf-8")


def run_python(
    code: str, site: Path, log: Path, **environment: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    env.update(PYTHONPATH=str(site), IMPORT_LOG=str(log), **environment)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=site.parent,
        timeout=HANG_LIMIT_S,
    )


PLUGINS_JSON = """
import json
from plugtrain.cli import main
raise SystemExit(main(["plugins", "--json"]))
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (tmp_path / "log").mkdir()
    return site


# -- unit ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"), [("1.0", (1, 0)), ("1", (1, 0)), ("2.13", (2, 13)), (" 3.1 ", (3, 1))]
)
def test_parse_api_version(text, expected):
    assert parse_api_version(text) == expected


@pytest.mark.parametrize("text", ["", "one", "1.0.0", ">=1.0", "1.x", "v1"])
def test_parse_api_version_rejects_anything_else(text):
    with pytest.raises(ValueError, match=r"MAJOR\.MINOR"):
        parse_api_version(text)


def test_a_declaration_means_that_minor_or_later_within_its_major():
    assert supported_range("1.2") == ">=1.2,<2"
    assert compatible("1.0", "1.0")
    assert compatible("1.0", "1.7")
    assert compatible("1.2", "1.2")
    assert not compatible("1.3", "1.2")
    assert not compatible("1.0", "2.0")
    assert not compatible("2.0", "1.9")


def test_the_cores_api_version_is_well_formed():
    major, _minor = parse_api_version(plugtrain.PLUGIN_API_VERSION)
    assert major >= 1


def test_incompatibility_names_both_versions_and_what_to_upgrade(site):
    make_distribution(site, "old_plugin", ["0.9"])
    make_distribution(site, "future_plugin", ["2.1"])
    make_distribution(site, "both_plugin", ["0.9", "1.0"])
    make_distribution(site, "quiet_plugin", None)
    found = {d.metadata["Name"]: d for d in importlib.metadata.distributions(path=[str(site)])}
    old = incompatibility(found["old-plugin"], "1.0")
    assert old is not None
    assert "plugin API >=0.9,<1" in old
    assert f"this plugtrain {plugtrain.__version__} provides plugin API 1.0" in old
    assert "upgrade it to a release made for plugin API 1.x" in old
    future = incompatibility(found["future-plugin"], "1.0")
    assert future is not None
    assert ">=2.1,<3" in future
    assert "upgrade plugtrain to a release providing plugin API 2.1" in future
    assert incompatibility(found["both-plugin"], "1.0") is None
    assert declared_api(found["both-plugin"]) == ["0.9", "1.0"]
    assert incompatibility(found["quiet-plugin"], "1.0") is None


# -- end to end, real metadata -----------------------------------------------------------------


def test_an_incompatible_plugin_is_reported_once_and_never_imported(site):
    log = site.parent / "log"
    make_distribution(site, "future_plugin", ["2.0"], version="3.1")
    make_distribution(site, "current_plugin", [plugtrain.PLUGIN_API_VERSION])
    make_distribution(site, "legacy_plugin", None)
    make_distribution(site, "garbled_plugin", ["one"])
    done = run_python(PLUGINS_JSON, site, log)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}

    assert rows["future_plugin"]["status"] == "failed"
    error = rows["future_plugin"]["error"]
    assert ">=2.0,<3" in error
    assert f"provides plugin API {plugtrain.PLUGIN_API_VERSION}" in error
    assert rows["garbled_plugin"]["status"] == "failed"
    assert "malformed plugin API version 'one'" in rows["garbled_plugin"]["error"]
    assert not (log / "future_plugin").exists()
    assert not (log / "garbled_plugin").exists()

    # a compatible declaration, or none at all, loads as before
    for name, model in (("current_plugin", "CurrentPlugin"), ("legacy_plugin", "LegacyPlugin")):
        assert rows[name]["status"] == "loaded"
        assert rows[name]["components"] == {"model": [model]}
        assert (log / name).exists()

    # the API each distribution declared, whatever became of it
    assert rows["future_plugin"]["api"] == ["2.0"]
    assert rows["current_plugin"]["api"] == [plugtrain.PLUGIN_API_VERSION]
    assert rows["legacy_plugin"]["api"] == []
    assert rows["builtin"]["api"] == [plugtrain.PLUGIN_API_VERSION]

    lines = [line for line in done.stderr.splitlines() if "future_plugin" in line]
    assert len(lines) == 1
    assert "from future-plugin 3.1 failed and was skipped" in lines[0]
    assert "plugin API >=2.0,<3" in lines[0]
    assert f"provides plugin API {plugtrain.PLUGIN_API_VERSION}" in lines[0]


def test_strict_mode_makes_an_incompatible_plugin_an_error(site):
    log = site.parent / "log"
    make_distribution(site, "future_plugin", ["2.0"])
    code = "from plugtrain.cli import main\nraise SystemExit(main(['list']))"
    done = run_python(code, site, log, PLUGTRAIN_STRICT_PLUGINS="1")
    assert done.returncode == 1
    assert "plugin 'future_plugin' from future-plugin 0.3 failed" in done.stderr
    assert f"provides plugin API {plugtrain.PLUGIN_API_VERSION}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (log / "future_plugin").exists()


def test_naming_an_incompatible_plugin_explicitly_does_not_bypass_the_check(site):
    log = site.parent / "log"
    make_distribution(site, "future_plugin", ["2.0"])
    code = "from plugtrain.cli import main\nraise SystemExit(main(['-p', 'future_plugin', 'list']))"
    done = run_python(code, site, log, PLUGTRAIN_DISABLE_PLUGIN_AUTOLOAD="1")
    assert done.returncode == 0, done.stderr
    assert "incompatible plugin API" in done.stderr
    assert not (log / "future_plugin").exists()


@pytest.mark.parametrize(
    "distribution",
    [
        "plugtrain-optimizers",
        "plugtrain-schedulers",
        "plugtrain-backends",
        "plugtrain-callbacks",
        "plugtrain-sparsity",
        "plugtrain-models",
    ],
)
def test_built_in_distributions_declare_a_compatible_api(distribution):
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    assert declared_api(found), f"{distribution} declares no {API_GROUP} entry point"
    assert incompatibility(found) is None


def test_plugins_shows_the_api_each_plugin_declared(site):
    make_distribution(site, "future_plugin", ["2.0"], version="3.1")
    make_distribution(site, "legacy_plugin", None)
    code = "from plugtrain.cli import main\nraise SystemExit(main(['plugins']))"
    done = run_python(code, site, site.parent / "log")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    provided = plugtrain.PLUGIN_API_VERSION
    assert lines[0] == f"plugtrain {plugtrain.__version__} provides plugin API {provided}"
    future = lines.index("future_plugin: future-plugin 3.1 [failed] (future_plugin.plugin)")
    assert lines[future + 1] == "    plugin API: 2.0"
    legacy = lines.index("legacy_plugin: legacy-plugin 0.3 [loaded] (legacy_plugin.plugin)")
    assert lines[legacy + 1] == "    plugin API: not declared"


def _in_repo_distributions() -> list[Path]:
    repo = REPO
    return sorted([*repo.glob("plugins/*/pyproject.toml"), *repo.glob("examples/*/pyproject.toml")])


@pytest.mark.parametrize("pyproject", _in_repo_distributions(), ids=lambda p: p.parent.name)
def test_every_distribution_here_requires_the_core_by_the_one_rule(pyproject):
    import tomllib

    from plugtrain.discovery.compat import core_requirement

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    declared = list(project["entry-points"][API_GROUP])
    oldest = min(declared, key=parse_api_version)
    required = [d for d in project["dependencies"] if d.startswith("plugtrain")]
    assert required == [core_requirement(oldest)]
