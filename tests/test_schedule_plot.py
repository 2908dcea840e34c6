"""plugtrain.authoring.schedule_plot: schedules evaluated and drawn from schemas, without torch."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from plugtrain.authoring.schedule_plot import plot_schedules, schedule_curves
from plugtrain.errors import ConfigError

pytest.importorskip("plugtrain_schedulers", reason="plugtrain-schedulers is not installed")

SEED = [
    {
        "SequentialLR": {
            "schedulers": [
                {
                    "LinearLR": {
                        "initial_learning_rate": 0.01,
                        "end_learning_rate": 0.001,
                        "total_iters": 500,
                    }
                },
                {
                    "CosineDecayLR": {
                        "initial_learning_rate": 0.001,
                        "end_learning_rate": 0.0001,
                        "total_iters": 500,
                    }
                },
            ]
        }
    },
    {
        "CosineDecayWD": {
            "initial_weight_decay": 0.01,
            "end_weight_decay": 0.001,
            "total_iters": 1000,
            "param_group_tags": ["bias_params", None],
        }
    },
]


def test_curves_of_the_seed_example():
    lr, *wd = schedule_curves(SEED)
    assert (lr.name, lr.key, lr.tag, lr.label) == ("SequentialLR", "lr", "*", "SequentialLR")
    assert lr.steps == tuple(range(1000))  # the longest natural length
    assert lr.values[0] == pytest.approx(0.01)
    assert lr.values[499] == pytest.approx(0.001018)
    assert lr.values[500] == pytest.approx(0.001)
    assert lr.values[750] == pytest.approx(0.0001 + 0.0009 * 0.5)
    assert [(c.key, c.tag, c.label) for c in wd] == [
        ("weight_decay", "bias_params", "CosineDecayWD [bias_params]"),
        ("weight_decay", None, "CosineDecayWD [untagged]"),
    ]
    assert wd[0].values == wd[1].values
    assert wd[0].values[500] == pytest.approx(0.001 + 0.009 * 0.5 * (1 + math.cos(math.pi / 2)))


def test_explicit_steps_and_aliases():
    (curve,) = schedule_curves(
        [{"StepWD": {"initial_val": 1.0, "step_size": 2, "gamma": 0.5}}], [0, 3, 10]
    )
    assert curve.values == (1.0, 0.5, 1 / 32)
    (curve,) = schedule_curves([{"ConstantLR": {"learning_rate": 0.2}}], 3)
    assert curve.steps == (0, 1, 2)


def test_bad_arguments_are_reported_with_their_path():
    with pytest.raises(ConfigError, match=r"schedulers\[0\]\.SequentialLR\[1\]\.total_iters"):
        schedule_curves(
            [
                {
                    "SequentialLR": {
                        "schedulers": [
                            {"ConstantLR": {"learning_rate": 1.0, "total_iters": 3}},
                            {
                                "LinearLR": {
                                    "initial_learning_rate": 1.0,
                                    "end_learning_rate": 0.0,
                                    "total_iters": -1,
                                }
                            },
                        ]
                    }
                }
            ]
        )
    with pytest.raises(ConfigError, match="one-key mapping"):
        schedule_curves([{"ConstantLR": {}, "LinearLR": {}}])


def test_plot_writes_an_image_with_separate_axes(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_schedules(SEED, tmp_path / "schedule.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_evaluating_and_plotting_import_no_torch(tmp_path):
    script = (
        "import json, sys\n"
        "from plugtrain.authoring.schedule_plot import plot_schedules, schedule_curves\n"
        f"specs = json.loads({json.dumps(json.dumps(SEED))})\n"
        "schedule_curves(specs)\n"
        "try:\n"
        f"    plot_schedules(specs, {str(tmp_path / 'p.svg')!r})\n"
        "except ImportError:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
