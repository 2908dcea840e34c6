"""``plugtrain new``: what it writes for several kinds at once, and its usage errors."""

from __future__ import annotations

import ast

import pytest
from support.paths import REPO

from plugtrain.cli import main

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib


def test_several_kinds_make_one_package(tmp_path, capsys):
    folder = tmp_path / "pkg"
    words = ["optimizer", "Prodigy", "scheduler", "WarmupLR", "dataloader", "Blobs"]
    assert main(["new", *words, "--package", "acme-plugtrain-mix", "--dir", str(folder)]) == 0
    assert "wrote 16 files of acme-plugtrain-mix" in capsys.readouterr().out
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "acme-plugtrain-mix"
    # the plugin is named after the distribution, not after its first component
    assert project["entry-points"]["plugtrain"] == {"acme_mix": "acme_plugtrain_mix.plugin"}
    assert project["entry-points"]["plugtrain.api"] == {"1.1": "acme_plugtrain_mix.plugin"}
    assert "plugtrain>=0.1" in project["dependencies"]
    plugin = (folder / "src/acme_plugtrain_mix/plugin.py").read_text(encoding="utf-8")
    for hook, target in [
        ("plugtrain_register_optimizers", "acme_plugtrain_mix.prodigy:Prodigy"),
        ("plugtrain_register_schedulers", "acme_plugtrain_mix.warmup_lr:WarmupLR"),
        ("plugtrain_register_dataloaders", "acme_plugtrain_mix.blobs:blobs"),
    ]:
        assert f"def {hook}(" in plugin
        assert target in plugin
    for path in folder.rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"), str(path))  # every module is valid Python
    assert (folder / "conftest.py").read_text(encoding="utf-8").count("plugtrain.testing") == 1
    workflow = (folder / ".github/workflows/tests.yml").read_text(encoding="utf-8")
    assert "core: [oldest, newest]" in workflow
    assert "plugtrain.authoring.core_versions ${{ matrix.core }}" in workflow
    run = (folder / "examples/run.yaml").read_text(encoding="utf-8")
    assert "Prodigy: {lr: 0.05" in run
    assert "- WarmupLR:" in run
    assert "train_dataloader: {Blobs:" in run


def test_the_default_package_and_folder_come_from_the_first_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "model", "TinyNet"]) == 0
    assert (tmp_path / "plugtrain-tiny-net/src/plugtrain_tiny_net/tiny_net.py").is_file()


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["optimizer"], "give KIND NAME pairs"),
        (["optimiser", "Prodigy"], "unknown kind 'optimiser'; plugtrain new writes: optimizer"),
        (["optimizer", "my-opt"], "must be a class name"),
        (["optimizer", "A", "model", "A"], "share the module a.py"),
        (["optimizer", "Prodigy", "--package", "Bad_Name"], "package name 'Bad_Name'"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(tmp_path, capsys, words, says):
    assert main(["new", *words, "--dir", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err


def test_an_existing_folder_is_never_overwritten(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine", encoding="utf-8")
    assert main(["new", "optimizer", "Prodigy", "--dir", str(tmp_path)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "mine"


@pytest.mark.slow
def test_the_generated_code_is_lint_clean_and_strictly_typed(tmp_path):
    """Every kind in one package: ``ruff check``, ``ruff format --check`` and ``mypy --strict``.

    ruff runs with its defaults and the package's own settings (as an author's CI would);
    mypy's cache lives in the checkout's ``.mypy_cache`` (torch's stubs take a minute cold).
    """
    import subprocess
    import sys

    folder = tmp_path / "all"
    kinds = ["optimizer", "scheduler", "callback", "logger", "backend", "model", "dataloader"]
    kinds.append("sparsity")
    words = [word for kind in kinds for word in (kind, f"My{kind.capitalize()}")]
    words += ["scheduler", "MyDecayWD"]
    assert main(["new", *words, "--package", "acme-plugtrain-all", "--dir", str(folder)]) == 0
    cache = REPO / ".mypy_cache" / "scaffold"
    commands = (
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "--strict", "--cache-dir", str(cache), "src", "tests", "conftest.py"],
    )
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", *command],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, " ".join(command) + ":\n" + done.stdout + done.stderr


def test_a_wd_scheduler_is_scaffolded_as_one(tmp_path):
    folder = tmp_path / "wd"
    assert main(["new", "scheduler", "CosineWD", "--dir", str(folder)]) == 0
    schemas = (folder / "src/plugtrain_cosine_wd/schemas.py").read_text(encoding="utf-8")
    assert 'schedule_key: ClassVar[str] = "weight_decay"' in schemas
    assert "initial_weight_decay: float" in schemas
    test = (folder / "tests/test_cosine_wd.py").read_text(encoding="utf-8")
    assert 'param_groups[0]["weight_decay"]' in test
    run = (folder / "examples/run.yaml").read_text(encoding="utf-8")
    assert "initial_weight_decay: 0.01" in run
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["plugtrain"] == {"cosine_wd": "plugtrain_cosine_wd.plugin"}


def test_new_help_lists_every_kind(capsys):
    from plugtrain.authoring.scaffold import SCAFFOLD_KINDS

    with pytest.raises(SystemExit):
        main(["new", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for kind in SCAFFOLD_KINDS:
        assert kind in shown
