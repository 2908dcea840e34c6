"""``plugtrain new``: what it writes for several kinds at once, and its usage errors."""

from __future__ import annotations

import ast

import pytest

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
    assert project["entry-points"]["plugtrain"] == {"prodigy": "acme_plugtrain_mix.plugin"}
    assert project["entry-points"]["plugtrain.api"] == {"1.0": "acme_plugtrain_mix.plugin"}
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


def test_the_generated_code_is_lint_clean(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "all"
    kinds = ["optimizer", "scheduler", "callback", "logger", "backend", "model", "dataloader"]
    kinds.append("sparsity")
    words = [word for kind in kinds for word in (kind, f"My{kind.capitalize()}")]
    assert main(["new", *words, "--package", "acme-plugtrain-all", "--dir", str(folder)]) == 0
    for command in (["check", "--select", "E,F,W,B,UP,I", "."], ["format", "--check", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
