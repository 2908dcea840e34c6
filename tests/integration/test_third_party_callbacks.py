"""A third-party callback and logger installed for real: examples/acme-plugtrain-callbacks.

The example (``LossEMA``, a callback with state, and ``StdoutLogger``) is written only against
the documented protocols. It is installed once per module with pip (``--target`` a temporary
directory, from a copy, offline with this environment's setuptools) and used from subprocesses
with that directory on ``PYTHONPATH``, exactly as after ``pip install acme-plugtrain-callbacks``:
a YAML run file lists both, is checked, trained, resumed, and its bad arguments are reported
with their positions.
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
EXAMPLE = REPO / "examples" / "acme-plugtrain-callbacks"
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


@pytest.fixture(scope="module")
def site(install_offline: Callable[[str, Sequence[Path]], Path]) -> Path:
    """A directory into which pip installed acme-plugtrain-callbacks."""
    return install_offline("acme-callbacks", [EXAMPLE])


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
    optimizer: {{SGD: {{lr: 0.1, momentum: 0.9}}}}
    loop: {{max_steps: {max_steps}}}
    checkpoint: {{steps: 2}}
    logging: {{log_steps: 1}}
    callbacks:
      - LossEMA: {{decay: {decay}}}
    loggers:
      - ProgressLogger: null
      - StdoutLogger: {{prefix: acme, digits: 6}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 6, num_classes: 3}}
"""


def _write(folder: Path, model_dir: Path, max_steps: int, decay: object = 0.5) -> Path:
    path = folder / f"run_{max_steps}.yaml"
    path.write_text(RUN.format(model_dir=model_dir, max_steps=max_steps, decay=decay))
    return path


def _train(model_dir: Path) -> list[dict[str, float]]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == "train"]


def test_the_installed_example_is_listed(site, tmp_path):
    done = _plugtrain(site, "list", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = {(c["kind"], c["name"]): c["provider"] for c in json.loads(done.stdout)}
    assert found[("callback", "LossEMA")] == "acme-plugtrain-callbacks"
    assert found[("logger", "StdoutLogger")] == "acme-plugtrain-callbacks"


def test_a_run_file_with_both_trains_resumes_and_continues_the_callback_state(site, tmp_path):
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    done = _plugtrain(site, "fit", str(_write(tmp_path, straight, 8)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("acme ")]
    assert len(lines) == 9  # one per record, then the closing line
    assert lines[0].startswith("acme step 1 train loss=")
    assert "loss_ema=" in lines[0]
    assert lines[-1] == "acme closed after 8 records"
    records = _train(straight)
    average = None
    for record in records:  # the callback's formula, from the logged losses
        average = record["loss"] if average is None else 0.5 * average + 0.5 * record["loss"]
        assert record["loss_ema"] == pytest.approx(average, rel=1e-12)
    for steps in (4, 8):  # the same run in two commands: state restored from checkpoint_4
        done = _plugtrain(site, "fit", str(_write(tmp_path, cut, steps)), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert [r["loss_ema"] for r in _train(cut)] == [r["loss_ema"] for r in records]


def test_check_reports_a_bad_argument_of_the_example_with_its_position(site, tmp_path):
    run = _write(tmp_path, tmp_path / "never", 4, decay=1.5)
    done = _plugtrain(site, "check", str(run), cwd=tmp_path)
    assert done.returncode == 2
    assert f"{run}:12:26: trainer.init.callbacks[0].LossEMA.decay: must be < 1, got 1.5" in (
        done.stderr
    )
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
    assert "5 passed" in done.stdout
