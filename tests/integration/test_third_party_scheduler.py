"""A third-party scheduler plugin installed for real: examples/acme-plugtrain-warmup.

The example (``LinearWarmupLR`` on the core's scheduler base, ``HalvingLR`` a plain torch
``LRScheduler``) is written only against plugtrain's documented core API and depends on no other
plugin. It is installed once per session with pip (``--target`` a temporary directory, from a
copy, offline with this environment's setuptools) and used from subprocesses with that directory
on ``PYTHONPATH``, exactly as after ``pip install acme-plugtrain-warmup``: it nests in the
built-in ``SequentialLR`` and ``ChainedLR``, shares an optimizer with a built-in scheduler on
disjoint tags, is checked, plotted, trained, and resumed exactly.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.offline_install import clean_environment

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "acme-plugtrain-warmup"
DISTRIBUTION = "acme-plugtrain-warmup"
# A safety net against a hung subprocess, not a performance assertion.
HANG_LIMIT_S = 600


@pytest.fixture(scope="session")
def warmup_target(install_offline: Callable[[str, Sequence[Path]], Path]) -> Path:
    """A directory into which pip installed acme-plugtrain-warmup (once per session)."""
    return install_offline("acme-warmup", [EXAMPLE])


def _run(
    arguments: list[str], path: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *arguments],
        capture_output=True,
        text=True,
        check=False,
        env=clean_environment(PYTHONPATH=path),
        cwd=cwd,
        timeout=HANG_LIMIT_S,
    )


def _plugtrain(path: Path, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run(["-m", "plugtrain", *arguments], str(path), cwd)


# -- the run file ---------------------------------------------------------------------------

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 3
    model: {{MLP: {{in_features: 6, hidden: 8, out_features: 3}}}}
    optimizer:
      SGD:
        lr: 0.1
        momentum: 0.9
        params: [{{params: "*bias", tag: bias_params}}]
    schedulers:
      - SequentialLR:
          param_group_tags: [null]
          schedulers:
            - ChainedLR:
                schedulers:
                  - LinearWarmupLR: {{peak_learning_rate: 0.1, warmup_steps: 4}}
                  - StepLR: {{initial_learning_rate: 1.0, step_size: 2, gamma: 0.9}}
            - HalvingLR: {{every: 3}}
      - ConstantLR: {{learning_rate: 0.05, param_group_tags: bias_params}}
    loop: {{max_steps: {max_steps}}}
    checkpoint: {{steps: 4}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 6, num_classes: 3}}
"""


def _write_run(directory: Path, name: str, model_dir: Path, max_steps: int) -> Path:
    path = directory / name
    path.write_text(RUN.format(model_dir=model_dir, max_steps=max_steps), encoding="utf-8")
    return path


def expected_lr(e: int) -> float:
    """The schedule written out: warmup x step decay for 4 steps, then halving every 3."""
    if e < 4:
        return 0.1 * e / 4 * 0.9 ** (e // 2)
    value = 0.1  # HalvingLR was built on the optimizer's lr
    for k in range(1, e - 4 + 1):
        if k % 3 == 0:
            value *= 0.5
    return value


def _train_rows(model_dir: Path) -> dict[int, dict[str, Any]]:
    rows = {}
    for line in (model_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["split"] == "train":
            rows[record["step"]] = record
    return rows


def _weights(path: Path) -> str:
    """The model tensors of a checkpoint, as exact text (read in a subprocess with torch)."""
    code = (
        "import sys, torch\n"
        "state = torch.load(sys.argv[1], weights_only=True)['model']\n"
        "print({k: v.double().tolist() for k, v in sorted(state.items())})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_LIMIT_S,
    )
    return done.stdout


# -- the tests ------------------------------------------------------------------------------


def test_pip_installed_the_distribution_with_its_entry_point(warmup_target: Path) -> None:
    dist_info = warmup_target / "acme_plugtrain_warmup-0.1.0.dist-info"
    assert "warmup = acme_plugtrain_warmup.plugin" in (dist_info / "entry_points.txt").read_text()
    metadata = (dist_info / "METADATA").read_text(encoding="utf-8").splitlines()
    requires = [line for line in metadata if line.startswith("Requires-Dist:")]
    assert any(line.startswith("Requires-Dist: plugtrain") for line in requires)
    assert not [line for line in requires if "plugtrain-" in line]  # on the core alone
    assert not list(EXAMPLE.glob("src/*.egg-info"))


def test_the_examples_own_tests_pass_once_installed(warmup_target: Path) -> None:
    done = _run(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/acme-plugtrain-warmup/tests"],
        str(warmup_target),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout)
    assert "skipped" not in done.stdout


def test_check_accepts_the_run_and_positions_a_child_the_wrapper_refuses(
    warmup_target: Path, tmp_path: Path
) -> None:
    run = _write_run(tmp_path, "run.yaml", tmp_path / "model", 12)
    done = _plugtrain(warmup_target, "check", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        run.read_text(encoding="utf-8").replace(
            "- HalvingLR: {every: 3}",
            "- HalvingLR: {every: 3}\n            - ConstantWD: {weight_decay: 0.1}",
        ),
        encoding="utf-8",
    )
    done = _plugtrain(warmup_target, "check", str(bad), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if "ConstantWD" in text)
    assert f"{bad}:{line}:15: trainer.init.schedulers[0].SequentialLR.schedulers[2].ConstantWD" in (
        done.stderr
    )
    assert "schedules 'weight_decay', but SequentialLR schedules 'lr'" in done.stderr


def test_fit_follows_the_schedule_and_resumes_exactly(warmup_target: Path, tmp_path: Path) -> None:
    straight_dir = tmp_path / "straight"
    straight = _write_run(tmp_path, "straight.yaml", straight_dir, 12)
    done = _plugtrain(warmup_target, "fit", str(straight), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = _train_rows(straight_dir)
    assert sorted(rows) == list(range(1, 13))
    for step, row in rows.items():
        # the third party's warmup, nested twice, on the untagged group ...
        assert row["lr/0"] == pytest.approx(expected_lr(step), rel=1e-12), step
        # ... and the built-in ConstantLR on the bias group of the same optimizer
        assert row["lr/1:bias_params"] == 0.05
    assert len({row["lr/0"] for row in rows.values()}) == 5  # the schedule really moves

    resumed_dir = tmp_path / "resumed"
    first = _write_run(tmp_path, "first.yaml", resumed_dir, 6)
    assert _plugtrain(warmup_target, "fit", str(first), cwd=tmp_path).returncode == 0
    again = _write_run(tmp_path, "again.yaml", resumed_dir, 12)
    done = _plugtrain(warmup_target, "fit", str(again), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stderr
    resumed = _train_rows(resumed_dir)
    for step in range(7, 13):
        for key in ("lr/0", "lr/1:bias_params", "loss"):
            assert resumed[step][key] == rows[step][key], (step, key)
    assert math.isfinite(rows[12]["loss"])
    assert _weights(resumed_dir / "checkpoint_12.mdl") == _weights(
        straight_dir / "checkpoint_12.mdl"
    )


def test_plot_draws_the_run_and_says_what_was_stepped(warmup_target: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # not imported here: plot runs outside
        pytest.skip("matplotlib is not installed")
    run = _write_run(tmp_path, "run.yaml", tmp_path / "model", 12)
    image = tmp_path / "schedule.svg"
    done = _plugtrain(warmup_target, "plot", str(run), "-o", str(image), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = image.read_text(encoding="utf-8")
    assert "stepped: no closed form" in text  # SequentialLR holds HalvingLR: stepped
    assert "ConstantLR [bias_params]" in text


BROKEN_PLUGIN = '''
import attrs
from plugtrain import hookimpl
from plugtrain.curve import Curve
from plugtrain.scheduler import ScheduleSchema, Scheduler, tags_arg
from plugtrain.schema import arg


@attrs.frozen
class FragileArgs(ScheduleSchema):
    """A scheduler whose closed form divides by zero at step 3."""

    learning_rate: float = arg(0.1, ge=0)
    param_group_tags: str | list[str | None] | None = tags_arg()

    @staticmethod
    def curve(arguments, child_curve):
        return Curve(lambda e: arguments["learning_rate"] / (3 - e))


class FragileLR(Scheduler):
    schema = FragileArgs


@hookimpl
def plugtrain_register_schedulers(registry):
    registry.register("FragileLR", "acme_fragile.plugin:FragileLR", schema=FragileArgs)
'''


def test_an_error_in_a_plugins_code_names_its_distribution_and_component(
    warmup_target: Path,
    tmp_path: Path,
    install_offline: Callable[[str, Sequence[Path]], Path],
) -> None:
    source = tmp_path / "acme-fragile"
    (source / "acme_fragile").mkdir(parents=True)
    (source / "acme_fragile" / "__init__.py").write_text("", encoding="utf-8")
    (source / "acme_fragile" / "plugin.py").write_text(BROKEN_PLUGIN, encoding="utf-8")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "acme-fragile"\nversion = "0.2.0"\n'
        '[project.entry-points.plugtrain]\nfragile = "acme_fragile.plugin"\n'
        '[tool.setuptools]\npackages = ["acme_fragile"]\n',
        encoding="utf-8",
    )
    target = install_offline("acme-fragile", [source])
    run = tmp_path / "run.yaml"
    run.write_text(
        _write_run(tmp_path, "base.yaml", tmp_path / "model", 6)
        .read_text(encoding="utf-8")
        .replace("ConstantLR: {learning_rate: 0.05,", "FragileLR: {learning_rate: 0.05,"),
        encoding="utf-8",
    )
    path = os.pathsep.join([str(target), str(warmup_target)])
    done = _run(["-m", "plugtrain", "fit", str(run)], path, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "internal error" not in done.stderr
    assert (
        "plugtrain: error: scheduler 'FragileLR' from acme-fragile 0.2.0 raised "
        "ZeroDivisionError: float division by zero"
    ) in done.stderr
