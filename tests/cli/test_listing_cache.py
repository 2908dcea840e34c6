"""``plugtrain list`` reuses its rows while nothing they depend on changed, and only then.

Each case runs ``python -m plugtrain list --json`` in fresh interpreters with a folder of
distributions written by hand on ``PYTHONPATH`` (found through ``importlib.metadata`` like any
installed plugin) and a cache folder of its own. The plugin module writes a line to stderr when
it is imported, so a listing served from the cache is told apart by its silence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.offline_install import clean_environment
from support.plugtrain_cli import run_plugtrain
from support.reliability import write_dist

PLUGIN = '''\
import sys

from plugtrain import hookimpl

sys.stderr.write("imported {module}\\n")


@hookimpl
def plugtrain_register_optimizers(registry):
    for name in {names!r}:
        registry.register(name, "torch.optim:SGD", schema="{module}:Args")


import attrs


@attrs.frozen
class Args:
    """{summary}"""
'''


def _plugin(
    module: str, names: list[str], summary: str = "An optimizer for the cache tests."
) -> dict[str, str]:
    return {module: PLUGIN.format(module=module, names=names, summary=summary)}


@pytest.fixture
def listing(tmp_path):
    """``listing(**env)``: (stdout rows of ours, stderr) of ``plugtrain list --json``."""
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()

    def run(**extra: str) -> tuple[list[dict], str]:
        env = clean_environment(PYTHONPATH=str(site), PLUGTRAIN_CACHE_DIR=str(cache), **extra)
        done = run_plugtrain("list", "--json", env=env)
        assert done.returncode == 0, done.stderr
        rows = [r for r in json.loads(done.stdout) if r["name"].startswith("Cached")]
        return rows, done.stderr

    run.site = site  # type: ignore[attr-defined]
    run.cache = cache  # type: ignore[attr-defined]
    return run


def _names(rows: list[dict]) -> list[str]:
    return [r["name"] for r in rows]


def test_a_second_listing_comes_from_the_cache_and_equals_the_first(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    first, stderr = listing()
    assert "imported cached_one" in stderr
    assert first == [
        {
            "name": "CachedA",
            "kind": "optimizer",
            "aliases": [],
            "provider": "cached-one",
            "version": "1.0",
            "plugin": "one",
            "summary": "An optimizer for the cache tests.",
        }
    ]
    second, stderr = listing()
    assert second == first
    assert "imported" not in stderr
    assert len(list(listing.cache.glob("list-*.json"))) == 1
    uncached, stderr = listing(PLUGTRAIN_NO_CACHE="1")
    assert uncached == first
    assert "imported cached_one" in stderr


def test_installing_and_removing_a_distribution_invalidates_it(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    assert _names(listing()[0]) == ["CachedA"]
    write_dist(
        listing.site, "cached-two", _plugin("cached_two", ["CachedB"]), [("two", "cached_two")]
    )
    rows, stderr = listing()
    assert _names(rows) == ["CachedA", "CachedB"]
    assert "imported cached_two" in stderr
    for path in sorted(listing.site.glob("cached_two*"), reverse=True):  # pip uninstall's work
        if path.is_dir():
            for inner in path.iterdir():
                inner.unlink()
            path.rmdir()
        else:
            path.unlink()
    assert _names(listing()[0]) == ["CachedA"]


def test_a_new_version_of_a_distribution_invalidates_it(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    assert [r["version"] for r in listing()[0]] == ["1.0"]
    old = listing.site / "cached_one-1.0.dist-info"
    new = listing.site / "cached_one-1.1.dist-info"
    old.rename(new)
    metadata = new / "METADATA"
    metadata.write_text(metadata.read_text().replace("Version: 1.0", "Version: 1.1"))
    assert [r["version"] for r in listing()[0]] == ["1.1"]


def test_editing_a_plugin_module_in_place_invalidates_it(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    assert _names(listing()[0]) == ["CachedA"]
    module = listing.site / "cached_one.py"
    folder_time = os.stat(listing.site).st_mtime_ns
    with module.open("r+", encoding="utf-8") as f:  # in place: the folder does not change
        text = f.read().replace("for name in ['CachedA']", "for name in ['CachedA', 'CachedC']")
        f.seek(0)
        f.write(text)
        f.truncate()
    assert os.stat(listing.site).st_mtime_ns == folder_time
    rows, stderr = listing()
    assert _names(rows) == ["CachedA", "CachedC"]
    assert "imported cached_one" in stderr


def test_an_edited_schema_summary_is_seen(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    assert listing()[0][0]["summary"] == "An optimizer for the cache tests."
    module = listing.site / "cached_one.py"
    module.write_text(module.read_text().replace("for the cache tests", "with a new summary"))
    assert listing()[0][0]["summary"] == "An optimizer with a new summary."


def test_plugin_switches_in_the_environment_are_part_of_the_key(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    assert _names(listing()[0]) == ["CachedA"]
    assert _names(listing(PLUGTRAIN_BLOCK_PLUGINS="one")[0]) == []
    assert _names(listing()[0]) == ["CachedA"]


def test_a_failing_plugin_is_reported_every_time(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    write_dist(
        listing.site,
        "cached-bad",
        {"cached_bad": "raise RuntimeError('no luck')\n"},
        [("bad", "cached_bad")],
    )
    for _ in range(2):
        rows, stderr = listing()
        assert _names(rows) == ["CachedA"]
        assert "plugin 'bad' from cached-bad 1.0 failed and was skipped" in stderr
        assert "no luck" in stderr
    assert not list(listing.cache.glob("list-*.json"))


def test_an_unwritable_cache_folder_changes_nothing(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    listing.cache.write_text("a file where the folder should be")
    for _ in range(2):
        rows, stderr = listing()
        assert _names(rows) == ["CachedA"]
        assert "imported cached_one" in stderr


def test_a_damaged_cache_file_is_ignored_and_replaced(listing):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    expected = listing()[0]
    (stored,) = listing.cache.glob("list-*.json")
    stored.write_text('{"fingerprint": ')
    rows, stderr = listing()
    assert rows == expected
    assert "imported cached_one" in stderr
    assert json.loads(stored.read_text())["rows"]


def test_minus_p_and_programs_calling_main_never_use_it(listing, tmp_path):
    write_dist(
        listing.site, "cached-one", _plugin("cached_one", ["CachedA"]), [("one", "cached_one")]
    )
    listing()
    env = clean_environment(PYTHONPATH=str(listing.site), PLUGTRAIN_CACHE_DIR=str(listing.cache))
    done = run_plugtrain("-p", "no:one", "list", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert "CachedA" not in _names(json.loads(done.stdout))
    program = "import sys; from plugtrain.cli import main; sys.exit(main(['list', '--json']))"
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "imported cached_one" in done.stderr
