"""A third-party sparsity algorithm installed for real: examples/acme-plugtrain-sparsity.

The example (``RandomPrune``) is written only against the documented protocol. It is installed
once per module with pip (``--target`` a temporary directory, from a copy, offline with this
environment's setuptools) and used from subprocesses with that directory on ``PYTHONPATH``,
exactly as after ``pip install acme-plugtrain-sparsity``: a YAML run file lists it beside the
built-in ``rigl`` in one ``sparsity:`` list, is checked, trained, resumed, and its bad arguments
are reported with their positions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from support.offline_install import clean_environment
from support.plugtrain_cli import run_plugtrain

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme-plugtrain-sparsity"
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


@pytest.fixture(scope="module")
def site(install_offline: Callable[[str, Sequence[Path]], Path]) -> Path:
    """A directory into which pip installed acme-plugtrain-sparsity."""
    return install_offline("acme-sparsity", [EXAMPLE])


def _plugtrain(site: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_plugtrain(
        *arguments, env=clean_environment(PYTHONPATH=str(site)), cwd=cwd, timeout=HANG_LIMIT_S
    )


RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 3
    model: {{MLP: {{in_features: 6, hidden: 8, out_features: 3}}}}
    optimizer: {{AdamW: {{lr: 0.05}}}}
    loop: {{max_steps: {max_steps}}}
    checkpoint: {{steps: 2}}
    logging: {{log_steps: 1}}
    callbacks: [{{LogSparsity: {{}}}}]
    sparsity:
      - algorithm: RandomPrune
        sparsity: 0.5
        every: {every}
        param_filter: fc1.weight
      - algorithm: rigl
        sparsity: 0.75
        drop_fraction: 0.5
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 6, num_classes: 3}}
"""


def _write(folder: Path, model_dir: Path, max_steps: int, every: object = 2) -> Path:
    path = folder / f"run_{max_steps}.yaml"
    path.write_text(RUN.format(model_dir=model_dir, max_steps=max_steps, every=every))
    return path


def test_the_installed_example_is_listed(site, tmp_path):
    done = _plugtrain(site, "list", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = {(c["kind"], c["name"]): c["provider"] for c in json.loads(done.stdout)}
    assert found[("sparsity", "RandomPrune")] == "acme-plugtrain-sparsity"
    assert found[("sparsity", "RigL")] == "plugtrain-sparsity"


def test_beside_a_built_in_it_trains_and_resumes_exactly(site, tmp_path):
    import torch

    straight, cut = tmp_path / "straight", tmp_path / "cut"
    done = _plugtrain(site, "fit", str(_write(tmp_path, straight, 6)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    saved = torch.load(straight / "checkpoint_6.mdl", weights_only=True)
    assert saved["sparsity"] == [
        {"step": 6, "level": 0.5},
        {"step": torch.tensor(6), "sparsity": {}},
    ]
    model = saved["model"]
    assert int(model["fc1.weight_mask"].sum()) == 24  # 48 weights, halved at step 2, then floor
    assert int(model["fc2.weight_mask"].sum()) == 6  # rigl: trunc(0.25 * 24)
    for name in ("fc1.weight", "fc2.weight"):
        assert torch.count_nonzero(model[name][~model[name + "_mask"]]) == 0
    records = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["split"] == "train"][-1]
    assert last["sparsity/fc1.weight/actual"] == 0.5
    assert last["sparsity/fc2.weight*/target"] == 0.75
    for steps in (3, 6):  # the same run in two commands: resumed from checkpoint_3
        done = _plugtrain(site, "fit", str(_write(tmp_path, cut, steps)), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    resumed = torch.load(cut / "checkpoint_6.mdl", weights_only=True)
    for key, value in model.items():
        assert torch.equal(value, resumed["model"][key]), key
    assert resumed["sparsity"] == saved["sparsity"]


def test_check_reports_a_bad_argument_of_the_example_with_its_position(site, tmp_path):
    run = _write(tmp_path, tmp_path / "never", 4, every=0)
    done = _plugtrain(site, "check", str(run), cwd=tmp_path)
    assert done.returncode == 2
    line = RUN.splitlines().index("        every: {every}") + 1
    assert f"{run}:{line}:16: trainer.init.sparsity[0].every: must be >= 1, got 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_example_s_own_tests_pass_where_it_is_installed(site, tmp_path):
    tests = EXAMPLE / "tests"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        capture_output=True,
        text=True,
        check=False,
        env=clean_environment(PYTHONPATH=str(site)),
        cwd=tmp_path,
        timeout=HANG_LIMIT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
