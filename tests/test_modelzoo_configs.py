"""Run files as Cerebras Model Zoo 2.10 ships them, with only the model and the data replaced.

``tests/data/modelzoo/`` holds real Model Zoo trainer configs (each names its origin at its top)
whose ``model`` is plugtrain's ``MLP`` and whose data loaders are ``Digits``; every other key is
as Cerebras wrote it. Each must pass ``plugtrain check``; two of them train on CPU (fewer steps,
the backend set to CPU, through ``--set``) and are then evaluated by ``plugtrain validate_all``.

The one file with a ``sparsity`` section (issue 16) is marked ``xfail(strict=True)``, so the
mark must go when sparsity lands; without that section it checks today.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from plugtrain.cli import main

CORPUS = Path(__file__).parent / "data" / "modelzoo"
FILES = sorted(CORPUS.glob("*.yaml"))

PENDING = {"gpt3_125m_set75.yaml": "sparsity is issue 16"}
"""Why each file fails ``check`` today; remove an entry when what it needs lands."""

SECTIONS_PENDING = ("sparsity",)

TRAINED = ["falcon_7b.yaml", "llama3p1_8b_msl_8k.yaml"]

ON_CPU = [
    "--set",
    "trainer.init.backend.backend_type=CPU",
    "--set",
    "trainer.init.loop.max_steps=6",
    "--set",
    "trainer.init.checkpoint.steps=3",
]


def _marked(names):
    params = []
    for name in names:
        reason = PENDING.get(name)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(CORPUS / name, marks=marks, id=name))
    return params


def test_the_corpus_is_what_this_file_lists():
    assert [p.name for p in FILES] == [
        "bert_base_MSL128.yaml",
        "bert_large_MSL512_muP.yaml",
        "btlm_2p7b_2k.yaml",
        "esm2_t12_35M_UR50D.yaml",
        "falcon_7b.yaml",
        "gemma2_9b_msl8k.yaml",
        "gpt3_111m_mup.yaml",
        "gpt3_125m_set75.yaml",
        "gpt3_muP_40M.yaml",
        "gptj_6B_muP.yaml",
        "llama3p1_8b_msl_8k.yaml",
        "zephyr_7b_dpo.yaml",
    ]
    for path in FILES:
        head = path.read_text().splitlines()[0]
        assert head.startswith("# Origin: Cerebras/modelzoo src/cerebras/modelzoo/models/")


def plugtrain(*args: str, cwd: Path, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "plugtrain", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("path", _marked([p.name for p in FILES]))
def test_a_model_zoo_run_file_checks(path, capsys):
    status = main(["check", str(path)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert f"{path}: OK (1 trainer)" in captured.out
    assert "trainer: backend CSX; fit, validate, validate_all" in captured.out


def _fit_and_validate_all(path: Path, cwd: Path) -> list[str]:
    fitted = plugtrain("fit", str(path), *ON_CPU, cwd=cwd)
    assert fitted.returncode == 0, fitted.stderr
    assert "trainer 0: validation loss" in fitted.stdout
    checked = plugtrain("validate_all", str(path), *ON_CPU, cwd=cwd)
    assert checked.returncode == 0, checked.stderr
    return checked.stdout.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("path", _marked(TRAINED))
def test_a_model_zoo_run_file_trains_on_cpu_and_validates_all(path, tmp_path):
    lines = _fit_and_validate_all(path, tmp_path)
    assert [line.split(" on ")[0] for line in lines] == [
        "trainer 0: validation of model_dir/checkpoint_3.mdl (step 3)",
        "trainer 0: validation of model_dir/checkpoint_6.mdl (step 6)",
    ]


def _without_pending(path: Path, target: Path) -> Path:
    """The run file without the sections other work brings (comments are dropped)."""
    data = yaml.safe_load(path.read_text())
    for section in SECTIONS_PENDING:
        data["trainer"]["init"].pop(section, None)
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


@pytest.mark.parametrize("name", sorted(PENDING))
def test_every_other_section_of_a_pending_run_file_checks_today(name, tmp_path, capsys):
    stripped = _without_pending(CORPUS / name, tmp_path / name)
    status = main(["check", str(stripped)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "OK (1 trainer)" in captured.out
