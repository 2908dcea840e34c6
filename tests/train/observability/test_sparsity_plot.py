"""``plugtrain plot`` draws each sparsity group's target sparsity and drop fraction (no torch)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
from support.paths import DATA

import plugtrain
from plugtrain.authoring.schedule_plot import schedule_curves
from plugtrain.config import load_run_file, plan_run
from plugtrain.config.validation.validate import plan_sparsity
from plugtrain.registry import Registry
from plugtrain.sparsity_schema import SparsitySchema, sparsity_arg, update_arg
from plugtrain.testing import isolated_registry

RIGL = DATA / "modelzoo" / "gpt3_125m_rigl75.yaml"


@pytest.fixture
def registry(installed_registry: Registry) -> Registry:
    for module in ("plugtrain_sparsity", "plugtrain_schedulers"):
        pytest.importorskip(module, reason=f"{module} is not installed")
    return installed_registry


def test_the_gpt3_rigl_file_plots_sparsity_and_drop_fraction_beside_the_lr(
    registry: Registry,
) -> None:
    (trainer,) = plan_run(load_run_file(RIGL), registry, str(RIGL)).trainers
    specs = [spec.to_mapping() for spec in trainer.schedulers]
    curves = schedule_curves(
        specs, [0, 1792, 3500, 3584, 4777], registry, sparsity=trainer.sparsity
    )
    assert [(c.name, c.key) for c in curves] == [
        ("SequentialLR", "lr"),
        ("RigL (sparsity)", "sparsity"),
        ("RigL (sparsity)", "drop_fraction"),
    ]
    _, target, drop = curves
    assert target.values == (0.75,) * 5
    assert drop.values[0] == pytest.approx(0.3, abs=1e-15)
    assert drop.values[1] == pytest.approx(0.15, abs=1e-15)
    # The last update (update: {freq: 100, stop: 3584}) is step 3500: the cosine's value there.
    expected = 0.15 + 0.15 * math.cos(math.pi * 3500 / 3584)
    assert drop.values[2] == pytest.approx(expected, rel=1e-12)
    # After it no update drops anything: the drop fraction is not drawn (NaN), where the
    # periodic cosine would rise again.
    assert math.isnan(drop.values[3])
    assert math.isnan(drop.values[4])


def test_a_gmp_schedule_and_a_cycling_list_follow_their_update_steps(registry: Registry) -> None:
    groups = plan_sparsity(
        registry,
        [
            {"algorithm": "gmp", "sparsity": {"type": "linear", "init": 0.0, "slope": 0.3}},
            {"algorithm": "set", "sparsity": [0.5, 0.6, 0.7], "update": {"freq": 2}},
            {"algorithm": "set", "sparsity": [0.5, 0.6], "update": {"freq": 2, "start": 3}},
        ],
    )
    curves = schedule_curves([], range(6), registry, sparsity=groups)
    assert [(c.name, c.key) for c in curves] == [
        ("GMP (sparsity[0])", "sparsity"),
        ("SET (sparsity[1])", "sparsity"),
        ("SET (sparsity[1])", "drop_fraction"),
        ("SET (sparsity[2])", "sparsity"),
        ("SET (sparsity[2])", "drop_fraction"),
    ]
    gmp, cycled, drop, late, _ = curves
    # Linear, clamped to [0, 1] as the algorithms use it.
    assert gmp.values == pytest.approx((0.0, 0.3, 0.6, 0.9, 1.0, 1.0), abs=1e-12)
    # Drawn as the level the masks hold (LogSparsity's target). Starts sparse (step 0 is an
    # update step) at values[0]; update step 2 applies values[1], step 4 values[2].
    assert cycled.values == (0.5, 0.5, 0.6, 0.6, 0.7, 0.7)
    # Starts dense (start 3): update step 3 applies values[0], step 5 values[1].
    assert late.values == (0.5, 0.5, 0.5, 0.5, 0.5, 0.6)
    assert drop.values == (0.3,) * 6


@attrs.frozen
class _PruneArgs(SparsitySchema):
    """Prune to a schedule (a third party's algorithm)."""

    sparsity: Any = sparsity_arg()  # noqa: RUF009 - attrs fields, not dataclass defaults
    update: Any = update_arg()  # noqa: RUF009

    update_argument: ClassVar[str | None] = "update"


class _ThirdParty:
    @plugtrain.hookimpl
    def plugtrain_register_sparsity(self, registry: Any) -> None:
        registry.register("AcmePrune", "acme:AcmePrune", schema=_PruneArgs)


def test_a_third_party_algorithm_plots_through_its_schema() -> None:
    registry = isolated_registry(_ThirdParty())
    (group,) = plan_sparsity(registry, {"algorithm": "acmeprune", "sparsity": [0.2, 0.4]})
    (curve,) = schedule_curves([], range(4), registry, sparsity=[group])
    assert (curve.name, curve.key) == ("AcmePrune (sparsity)", "sparsity")
    # Initialisation applies 0.2; it moves once before step 1, and every step is an update.
    assert curve.values == (0.2, 0.4, 0.2, 0.4)


PROBE = """
import runpy, sys
import matplotlib
matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text, to read the labels back
sys.argv = ["plugtrain", *sys.argv[1:]]
try:
    runpy.run_module("plugtrain", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("TORCH-IMPORTED" if any(m.split(".")[0] == "torch" for m in sys.modules) else "TORCH-FREE")
sys.exit(code)
"""


@pytest.mark.slow
def test_plot_command_draws_sparsity_in_a_real_process_without_torch(
    tmp_path: Path, registry: Registry
) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "schedule.svg"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "plot", str(RIGL), "-o", str(target)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "TORCH-FREE"
    assert f"trainer: schedules drawn in {target}" in done.stdout
    svg = target.read_text(encoding="utf-8")
    for text in ("learning rate", "target sparsity", "drop fraction", "RigL (sparsity)"):
        assert text in svg, text


def test_plot_draws_a_run_file_with_sparsity_and_no_scheduler(
    tmp_path: Path, registry: Registry
) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run.yaml"
    run.write_text(
        "trainer:\n"
        "  init:\n"
        "    model: {MLP: {in_features: 4, out_features: 2}}\n"
        "    optimizer: {SGD: {lr: 0.1}}\n"
        "    loop: {max_steps: 50}\n"
        "    sparsity:\n"
        "      {algorithm: gmp, sparsity: {type: exp, init: 0.0, gamma: -0.1, final: 0.9}}\n"
        "  fit:\n"
        "    train_dataloader: {Synthetic: {batch_size: 4}}\n",
        encoding="utf-8",
    )
    from plugtrain.cli import main

    target = tmp_path / "s.png"
    assert main(["plot", str(run), "-o", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
