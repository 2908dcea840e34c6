"""Run files as Cerebras Model Zoo 2.10 ships them, with only the model and the data replaced.

``tests/data/modelzoo/`` holds real Model Zoo trainer configs (each names its origin at its top)
whose ``model`` is plugtrain's ``MLP`` and whose data loaders are ``Digits``; every other key is
as Cerebras wrote it. Each must pass ``plugtrain check``; two of them train on CPU (fewer steps,
the backend set to CPU, through ``--set``) and are then evaluated by ``plugtrain validate_all``.

The six GPT-3 files of Model Zoo's ``configs/sparsity/`` that have a ``trainer.init.sparsity``
section (SPEC-sparsity section 6) are all here, and check like the rest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import DATA

import plugtrain.bases.backend
from plugtrain.cli import main

CORPUS = DATA / "modelzoo"
FILES = sorted(CORPUS.glob("*.yaml"))

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
    return [pytest.param(CORPUS / name, id=name) for name in names]


def test_the_corpus_is_what_this_file_lists():
    assert [p.name for p in FILES] == [
        "bert_base_MSL128.yaml",
        "bert_large_MSL512_muP.yaml",
        "btlm_2p7b_2k.yaml",
        "esm2_t12_35M_UR50D.yaml",
        "falcon_7b.yaml",
        "gemma2_9b_msl8k.yaml",
        "gpt3_111m_mup.yaml",
        "gpt3_125m_rigl75.yaml",
        "gpt3_125m_set75.yaml",
        "gpt3_125m_sparsewide-ift_rigl75.yaml",
        "gpt3_125m_sparsewide-ift_static50.yaml",
        "gpt3_125m_static75.yaml",
        "gpt3_6p7b_vspdf_phase1.yaml",
        "gpt3_muP_40M.yaml",
        "gptj_6B_muP.yaml",
        "llama3p1_8b_msl_8k.yaml",
        "zephyr_7b_dpo.yaml",
    ]
    for path in FILES:
        head = path.read_text().splitlines()[0]
        assert head.startswith("# Origin: Cerebras/modelzoo src/cerebras/modelzoo/models/")


@pytest.mark.parametrize("path", _marked([p.name for p in FILES]))
def test_a_model_zoo_run_file_checks(path, capsys):
    status = main(["check", str(path)])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert f"{path}: OK (1 trainer)" in captured.out
    assert "trainer: backend CSX; fit, validate, validate_all" in captured.out


def _fit_and_validate_all(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``plugtrain fit`` then ``validate_all`` in this process, in the current folder."""
    status = main(["fit", str(path), *ON_CPU])
    fitted = capsys.readouterr()
    assert status == 0, fitted.err
    assert "trainer 0: validation loss" in fitted.out
    status = main(["validate_all", str(path), *ON_CPU])
    checked = capsys.readouterr()
    assert status == 0, checked.err
    return checked.out.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("path", _marked(TRAINED))
def test_a_model_zoo_run_file_trains_on_cpu_and_validates_all(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # the process-wide record of flags already reported inactive stays as other tests expect it
    monkeypatch.setattr(plugtrain.bases.backend, "_REPORTED_FLAGS", set())
    lines = _fit_and_validate_all(path, capsys)
    assert [line.split(" on ")[0] for line in lines] == [
        "trainer 0: validation of model_dir/checkpoint_3.mdl (step 3)",
        "trainer 0: validation of model_dir/checkpoint_6.mdl (step 6)",
    ]


# (file, algorithm, sparsity, drop_fraction half_period, update) as SPEC-sparsity section 6 lists
SPARSITY = [
    ("gpt3_125m_static75.yaml", "Static", 0.75, None, None),
    ("gpt3_125m_set75.yaml", "SET", 0.75, 3584, {"freq": 100, "stop": 3584}),
    ("gpt3_125m_rigl75.yaml", "RigL", 0.75, 3584, {"freq": 100, "stop": 3584}),
    ("gpt3_125m_sparsewide-ift_static50.yaml", "Static", 0.5, None, None),
    ("gpt3_125m_sparsewide-ift_rigl75.yaml", "RigL", 0.75, 17209, {"freq": 500, "stop": 17209}),
    ("gpt3_6p7b_vspdf_phase1.yaml", "Static", 0.9, None, None),
]
GPT3_GLOBS = (
    "*proj_[qkv]_dense_layer.weight",
    "*proj_output_dense_layer.weight",
    "*linear_layer.weight",
)


@pytest.mark.parametrize(("name", "algorithm", "level", "half_period", "update"), SPARSITY)
def test_a_model_zoo_sparsity_section_plans_as_the_spec_lists(
    name, algorithm, level, half_period, update, installed_registry
):
    from plugtrain.config import load_run_file, plan_run

    path = CORPUS / name
    (trainer,) = plan_run(load_run_file(path), installed_registry, str(path)).trainers
    (group,) = trainer.sparsity
    assert group.algorithm == algorithm
    assert group.param_filter == GPT3_GLOBS
    assert group.arguments["sparsity"] == level
    assert group.arguments["init_method"] == "random"
    assert group.path == "trainer.init.sparsity"
    assert group.location is not None
    assert group.location.startswith(f"{path}:")
    if half_period is None:
        assert set(group.arguments) == {"sparsity", "init_method"}
    else:
        drop = {"type": "cosine", "init": 0.3, "half_period": half_period}
        assert group.arguments["drop_fraction"] == drop
        assert group.arguments["update"] == update
