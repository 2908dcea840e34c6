"""A third-party plugin installed for real: examples/acme-plugtrain-adan.

The example is installed once per session with pip (``--target`` a temporary directory, from a
copy so that the build leaves nothing in the repository) and used from subprocesses that have
that directory on ``PYTHONPATH``: plugtrain discovers it through ``importlib.metadata`` exactly
as it would after ``pip install acme-plugtrain-adan``. Removal is deleting the installed files,
which is what ``pip uninstall`` does; a second test runs ``pip install`` and ``pip uninstall``
in a fresh virtual environment.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.offline_install import fit_to_setuptools, offline_build_problem, version_of

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme-plugtrain-adan"
DISTRIBUTION = "acme-plugtrain-adan"
VERSION = "0.1.0"
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


# -- installing -----------------------------------------------------------------------------


def _copy_source(destination: Path, *, adapt: bool = True) -> Path:
    """Copy the example to ``destination``; with ``adapt``, fit it to this setuptools."""
    source = destination / "acme-plugtrain-adan"
    shutil.copytree(
        EXAMPLE,
        source,
        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", ".pytest_cache"),
    )
    if adapt:
        fit_to_setuptools(source)
    return source


def _pip(*arguments: str, python: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    if python is not None:
        command += ["--python", python]
    return subprocess.run(
        [*command, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=_environment(),
        timeout=HANG_LIMIT_S,
    )


def _install_arguments(source: Path, *, offline: bool = True) -> list[str]:
    # --no-build-isolation and --no-index: build with this environment's setuptools, offline.
    build = ["--no-build-isolation", "--no-index"] if offline else []
    return ["install", "--no-deps", *build, "--no-cache-dir", "--quiet", str(source)]


@pytest.fixture(scope="session")
def adan_target(
    install_offline: Callable[[str, Sequence[Path]], Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """A directory into which pip installed acme-plugtrain-adan (once per session).

    The build uses this environment's setuptools, offline (the shared ``install_offline``).
    Where that cannot work (no setuptools, or one too old to build wheels by itself, as in a
    fresh Python 3.11 venv), pip builds with isolation instead, fetching setuptools from the
    index; without an index the tests skip with both reasons.
    """
    if version_of("pip") is None:
        pytest.skip("pip is not installed in this environment")
    problem = offline_build_problem()
    if problem is None:
        return install_offline("acme-adan", [EXAMPLE])
    work = tmp_path_factory.mktemp("acme-adan")
    target = work / "site"
    source = _copy_source(work, adapt=False)
    done = _pip(*_install_arguments(source, offline=False), "--target", str(target))
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.skip(f"cannot build the example offline ({problem}) nor with an index ({last})")
    return target


# -- running --------------------------------------------------------------------------------


def _environment(**extra: str) -> dict[str, str]:
    """This environment without plugtrain's switches or a PYTHONPATH, plus ``extra``.

    pytorch-optimizer has an ``Adan`` of its own, which plugtrain-bridges (when installed here)
    would offer once the acme one is gone: its plugin is blocked, so that these tests see
    only the distribution they install.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PLUGTRAIN_") and key != "PYTHONPATH"
    }
    env["PLUGTRAIN_BLOCK_PLUGINS"] = "pytorch-optimizer"
    env.update(extra)
    return env


def _run(
    arguments: list[str],
    path: Path | None,
    *,
    python: str = sys.executable,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGUMENTS`` with ``path`` (if any) on ``PYTHONPATH``, in ``cwd``.

    ``cwd`` defaults to the parent of ``path``, outside the repository, so that nothing from
    the working tree is importable by accident.
    """
    env = _environment() if path is None else _environment(PYTHONPATH=str(path))
    return subprocess.run(
        [python, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=cwd or (path.parent if path is not None else None),
        timeout=HANG_LIMIT_S,
    )


def _json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def _python_json(code: str, path: Path, **options: Any) -> Any:
    """Run ``code`` (which prints one JSON document) in a subprocess and return the data."""
    return _json_of(_run(["-c", code], path, **options))


TRAIN = """
import json, sys
import torch
import plugtrain

Adan = plugtrain.resolve("optimizer", "Adan")
info = plugtrain.describe("optimizer", "Adan")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
inputs = torch.randn(64, 4)
targets = torch.sin(inputs.sum(dim=1, keepdim=True))
optimizer = Adan(model.parameters(), learning_rate=0.01, weight_decay=0.01)
losses = []
for _ in range(40):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(json.dumps({
    "class": Adan.__qualname__,
    "file": sys.modules[Adan.__module__].__file__,
    "distribution": info.distribution,
    "version": info.version,
    "losses": losses,
}))
"""

RESOLVE = """
import json, sys
import plugtrain
from plugtrain.registry._suggest import close_matches

name = sys.argv[1]
try:
    found = plugtrain.resolve("optimizer", name)
except plugtrain.UnknownNameError as exc:
    result = {"error": str(exc), "type": type(exc).__name__}
else:
    result = {"found": found.__module__ + ":" + found.__qualname__}
result["close"] = close_matches(name, plugtrain.names("optimizer"))
result["names"] = plugtrain.names("optimizer")
print(json.dumps(result))
"""


def _resolve(name: str, path: Path | None, **options: Any) -> dict[str, Any]:
    return _json_of(_run(["-c", RESOLVE, name], path, **options))  # type: ignore[no-any-return]


def _adan_rows(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in listing if row["name"] == "Adan"]


# -- the tests ------------------------------------------------------------------------------


def test_pip_installs_a_distribution_with_the_entry_point(adan_target: Path) -> None:
    dist_info = adan_target / f"acme_plugtrain_adan-{VERSION}.dist-info"
    entry_points = (dist_info / "entry_points.txt").read_text(encoding="utf-8")
    assert "[plugtrain]" in entry_points
    assert "adan = acme_plugtrain_adan.plugin" in entry_points
    assert (adan_target / "acme_plugtrain_adan" / "adan.py").is_file()
    # the build ran in a copy: no artefacts in the repository
    assert not (EXAMPLE / "build").exists()
    assert not list(EXAMPLE.glob("src/*.egg-info"))


def test_resolve_finds_adan_and_it_trains_a_model(adan_target: Path) -> None:
    result = _python_json(TRAIN, adan_target)
    assert result["class"] == "Adan"
    assert Path(result["file"]).is_relative_to(adan_target)
    assert result["distribution"] == DISTRIBUTION
    assert result["version"] == VERSION
    losses = result["losses"]
    assert losses[-1] < losses[0]
    assert min(losses[-5:]) < 0.5 * losses[0]


def test_list_json_shows_adan_with_its_provider(adan_target: Path) -> None:
    listing = _json_of(_run(["-m", "plugtrain", "list", "--json"], adan_target))
    rows = _adan_rows(listing)
    assert len(rows) == 1
    row = rows[0]
    assert row["kind"] == "optimizer"
    assert row["provider"] == DISTRIBUTION
    assert row["version"] == VERSION
    assert row["plugin"] == "adan"
    assert row["summary"].startswith("Adan")


def test_list_table_shows_adan_next_to_the_built_in_optimizers(adan_target: Path) -> None:
    done = _run(["-m", "plugtrain", "list", "optimizer"], adan_target)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("Adan "))
    assert line.split()[:4] == ["Adan", "optimizer", DISTRIBUTION, VERSION]
    try:
        importlib.metadata.distribution("plugtrain-optimizers")
    except importlib.metadata.PackageNotFoundError:
        return
    assert any(line.startswith("SGD ") for line in done.stdout.splitlines())


def test_listing_a_third_party_plugin_imports_no_torch(adan_target: Path) -> None:
    code = (
        "import io, json, sys, contextlib\n"
        "from plugtrain.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    for command in (['list'], ['show', 'Adan'], ['plugins']):\n"
        "        assert main(command) == 0\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'"
        " or m == 'acme_plugtrain_adan.adan')))"
    )
    assert _python_json(code, adan_target) == []


def test_plugins_command_shows_the_distribution(adan_target: Path) -> None:
    done = _run(["-m", "plugtrain", "plugins"], adan_target)
    assert done.returncode == 0, done.stderr
    assert f"adan: {DISTRIBUTION} {VERSION} [loaded] (acme_plugtrain_adan.plugin)" in done.stdout
    block = done.stdout.split("adan: ", 1)[1]
    assert "hooks: plugtrain_register_optimizers" in block
    assert "optimizers: Adan" in block

    rows = _json_of(_run(["-m", "plugtrain", "plugins", "--json"], adan_target))
    row = next(r for r in rows if r["name"] == "adan")
    assert row["distribution"] == DISTRIBUTION
    assert row["version"] == VERSION
    assert row["status"] == "loaded"
    assert row["components"] == {"optimizer": ["Adan"]}


def test_show_describes_the_arguments(adan_target: Path) -> None:
    done = _run(["-m", "plugtrain", "show", "Adan"], adan_target)
    assert done.returncode == 0, done.stderr
    assert f"Adan (optimizer) from {DISTRIBUTION} {VERSION}" in done.stdout
    assert "implementation: acme_plugtrain_adan.adan:Adan" in done.stdout
    assert "lr: float (default 0.001) [>= 0]" in done.stdout
    assert "aliases: learning_rate" in done.stdout


def test_the_examples_own_tests_pass_once_installed(adan_target: Path) -> None:
    """examples/acme-plugtrain-adan/tests skip when the package is absent; here they run."""
    done = _run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/acme-plugtrain-adan/tests"],
        adan_target,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout)
    assert "skipped" not in done.stdout


def test_removing_the_installed_files_removes_adan(adan_target: Path, tmp_path: Path) -> None:
    installed = tmp_path / "site"
    shutil.copytree(adan_target, installed)
    before = _resolve("Adan", installed)
    assert before["found"] == "acme_plugtrain_adan.adan:Adan"
    misspelt = _resolve("Adaan", installed)
    assert misspelt["type"] == "UnknownNameError"
    assert "Did you mean 'Adan'" in misspelt["error"]

    shutil.rmtree(installed)

    after = _resolve("Adan", installed)
    assert "Adan" not in after["names"]
    assert after["type"] == "UnknownNameError"
    message = after["error"]
    assert message.startswith("Unknown optimizer 'Adan'.")
    assert DISTRIBUTION not in message
    assert "pip install" not in message  # nothing plugtrain ships would bring 'Adan' back
    # the did-you-mean offers what is still installed, never the removed name
    for close in after["close"]:
        assert f"'{close}'" in message
    assert "Did you mean" in message or not after["close"]
    misspelt = _resolve("Adaan", installed)
    assert "'Adan'" not in misspelt["error"]
    listing = _json_of(_run(["-m", "plugtrain", "list", "--json"], installed))
    assert _adan_rows(listing) == []
    done = _run(["-m", "plugtrain", "plugins"], installed)
    assert DISTRIBUTION not in done.stdout


def _link_this_environment(venv_python: str) -> None:
    """Make this interpreter's site-packages (plugtrain, torch ...) visible to a new venv.

    ``--system-site-packages`` only reaches the base interpreter's packages, which are not
    this environment's when the tests run in a virtual environment themselves.
    """
    purelib = subprocess.run(
        [venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        env=_environment(),
        timeout=HANG_LIMIT_S,
    ).stdout.strip()
    directories = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = [f"import site; site.addsitedir({d!r})" for d in dict.fromkeys(directories)]
    Path(purelib, "_plugtrain_tests_parent.pth").write_text(
        "\n".join(lines) + "\n", encoding="utf-8"
    )


def _pip_version() -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", importlib.metadata.version("pip"))[:2])


def test_pip_install_and_uninstall_in_a_fresh_venv(tmp_path: Path) -> None:
    problem = offline_build_problem()
    if problem:
        pytest.skip(f"cannot install the example plugin offline: {problem}")
    if _pip_version() < (22, 3):
        pytest.skip("pip --python (to install into another environment) needs pip >= 22.3")
    venv = tmp_path / "venv"
    created = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
        capture_output=True,
        text=True,
        check=False,
        env=_environment(),
        timeout=HANG_LIMIT_S,
    )
    if created.returncode != 0:
        pytest.skip(f"cannot create a virtual environment: {created.stderr.strip()}")
    python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
    _link_this_environment(python)
    source = _copy_source(tmp_path)

    done = _pip(*_install_arguments(source), python=python)
    assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
    listing = _json_of(
        _run(["-m", "plugtrain", "list", "--json"], None, python=python, cwd=tmp_path)
    )
    assert [(r["provider"], r["version"]) for r in _adan_rows(listing)] == [(DISTRIBUTION, VERSION)]
    assert (
        _resolve("Adan", None, python=python, cwd=tmp_path)["found"]
        == "acme_plugtrain_adan.adan:Adan"
    )

    done = _pip("uninstall", "--yes", DISTRIBUTION, python=python)
    assert done.returncode == 0, f"pip uninstall failed:\n{done.stdout}\n{done.stderr}"
    after = _resolve("Adan", None, python=python, cwd=tmp_path)
    assert after["type"] == "UnknownNameError"
    assert after["error"].startswith("Unknown optimizer 'Adan'.")
