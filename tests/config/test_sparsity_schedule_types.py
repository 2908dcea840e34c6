"""A plugin adds a sparsity schedule type (kind ``sparsity_schedule``) and a run file uses it.

The plugin is a real module on disk, loaded with ``-p stairplug`` (and, for the Python API,
registered in memory); ``check`` places its argument errors at file:line:col, and ``fit`` trains
GMP to its levels.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch

from plugtrain import hookimpl
from plugtrain.cli import main
from plugtrain.errors import HyperParameterError, HyperParameterTypeError
from plugtrain.hyperparams import make_schedule
from plugtrain.schema import arg

PLUGIN = '''\
"""A staircase sparsity schedule (torch-free, as check builds schedules)."""

import attrs

from plugtrain import hookimpl
from plugtrain.hyperparams import HyperParameterSchedule
from plugtrain.schema import arg


@attrs.frozen
class Staircase(HyperParameterSchedule):
    """A level that rises by ``rise`` every ``every`` steps, up to ``top``."""

    rise: float = arg(help="the rise of each stair", gt=0, le=1)
    every: int = arg(help="the steps of one stair", gt=0)
    top: float = arg(1.0, help="the highest level", ge=0, le=1)

    def at(self, step: int) -> float:
        """``min(top, rise * (step // every))``."""
        return min(self.top, self.rise * (step // self.every))


@hookimpl
def plugtrain_register_sparsity_schedules(registry):
    registry.register("staircase", "stairplug:Staircase", schema="stairplug:Staircase")
'''

RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 3
    model:
      MLP: {{in_features: 16, out_features: 4, hidden: 20}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 6}}
    checkpoint: {{steps: 6}}
    sparsity:
      algorithm: gmp
      sparsity: {{type: Staircase, {arguments}}}
      update: {{freq: 1}}
  fit:
    train_dataloader: {{Synthetic: {{batch_size: 8, in_features: 16, num_classes: 4}}}}
"""


@pytest.fixture
def stairplug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin module ``stairplug`` in ``tmp_path``, importable; the folder."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "stairplug.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop("stairplug", None)


class _Broken:
    """A plugin whose schedule type points at a module that does not exist."""

    @hookimpl
    def plugtrain_register_sparsity_schedules(self, registry: Any) -> None:
        registry.register("gone", "no_such_module_here:Gone", schema=_GoneArgs)


@attrs.frozen
class _GoneArgs:
    """A schedule type that cannot be imported."""

    every: int = arg(help="steps")


def _run_file(tmp_path: Path, arguments: str) -> Path:
    path = tmp_path / "run.yaml"
    text = RUN.format(model_dir=tmp_path / "model_dir", arguments=arguments)
    path.write_text(text, encoding="utf-8")
    return path


def test_make_schedule_builds_a_plugin_type_and_checks_its_arguments(
    stairplug: Path, register_plugin: Any
) -> None:
    with pytest.raises(HyperParameterError, match="Unknown schedule type 'staircase'") as info:
        make_schedule({"type": "staircase", "rise": 0.25, "every": 2})
    assert info.value.key == "type"
    register_plugin(importlib.import_module("stairplug"), name="stairplug")
    schedule = make_schedule({"type": "StairCase", "rise": 0.25, "every": 2, "top": 0.6})
    assert [schedule(step) for step in range(8)] == [0, 0, 0.25, 0.25, 0.5, 0.5, 0.6, 0.6]
    assert schedule.arguments() == {"rise": 0.25, "every": 2, "top": 0.6}
    assert schedule.curve().at(5) == 0.5
    with pytest.raises(HyperParameterError, match=r"Valid types: .*cycling.*, staircase"):
        make_schedule({"type": "stairs"})
    with pytest.raises(HyperParameterTypeError, match="staircase schedule: unknown") as info:
        make_schedule({"type": "staircase", "rise": 0.25, "every": 2, "step": 1})
    assert (info.value.key, info.value.unknown_key) == ("step", True)
    with pytest.raises(HyperParameterError, match="rise must be of type float") as info:
        make_schedule({"type": "staircase", "rise": "fast", "every": 2})
    assert info.value.key == "rise"
    with pytest.raises(HyperParameterError, match="missing required argument 'every'") as info:
        make_schedule({"type": "staircase", "rise": 0.25})
    assert info.value.key is None
    register_plugin(_Broken(), name="broken_schedules")
    with pytest.raises(HyperParameterError, match="cannot be imported") as info:
        make_schedule({"type": "gone", "every": 2})
    assert info.value.key == "type"
    # the built-in types come first: a plugin cannot change what a written type means
    assert make_schedule({"type": "constant", "value": 0.5})(3) == 0.5


def test_list_and_show_name_the_schedule_type(
    stairplug: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-p", "stairplug", "list", "sparsity_schedule", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["name"] for entry in listed] == ["staircase"]
    assert main(["-p", "stairplug", "show", "staircase"]) == 0
    shown = capsys.readouterr().out
    assert "sparsity_schedule" in shown
    assert "every" in shown
    assert "the rise of each stair" in shown
    assert main(["-p", "stairplug", "list", "sparsity_schedule", "--markdown"]) == 0
    page = capsys.readouterr().out
    assert "## Sparsity schedule types" in page
    assert "### `staircase` (sparsity_schedule)" in page


def test_check_places_a_bad_argument_of_a_plugin_schedule(
    stairplug: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _run_file(tmp_path, "rise: 2.0, every: 2")
    assert main(["-p", "stairplug", "check", str(path)]) == 2
    err = capsys.readouterr().err
    where = f"{path}:14:41: trainer.init.sparsity.sparsity.rise"
    assert f"{where}: staircase schedule: rise must be <= 1, got 2.0" in err
    path = _run_file(tmp_path, "rise: 0.2, evry: 2")
    assert main(["-p", "stairplug", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:14:46: trainer.init.sparsity.sparsity.evry: staircase schedule: unknown" in err
    assert "Did you mean 'every'?" in err


@pytest.mark.slow
def test_a_run_file_trains_with_a_plugin_schedule_type(
    stairplug: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_backend: None
) -> None:
    path = _run_file(tmp_path, "rise: 0.25, every: 2, top: 0.6")
    # check never imports torch, the plugin's schedule included (a real process)
    code = (
        "import sys; from plugtrain.cli import main; "
        f"status = main(['-p', 'stairplug', 'check', {str(path)!r}]); "
        "assert 'torch' not in sys.modules, 'check imported torch'; sys.exit(status)"
    )
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stairplug), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.chdir(tmp_path)
    assert main(["-p", "stairplug", "fit", str(path)]) == 0
    saved = torch.load(tmp_path / "model_dir" / "checkpoint_6.mdl", weights_only=True)
    masks = {k: v for k, v in saved["model"].items() if k.endswith("_mask")}
    assert sorted(masks) == ["fc1.weight_mask", "fc2.weight_mask"]
    for key, mask in masks.items():
        # GMP's last update (step 6) set the level of the staircase at 6: min(0.6, 0.75)
        assert int(mask.sum()) == int((1 - 0.6) * mask.numel()), key
        weight = saved["model"][key.removesuffix("_mask")]
        assert torch.count_nonzero(weight[~mask]) == 0, key
