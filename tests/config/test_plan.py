"""The plan of a run: validated once, typed, immutable, plain values, no global side effect."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import attrs
import pytest
from support.plugtrain_cli import run_plugtrain

from plugtrain.config import load_plan, load_yaml, plan_run
from plugtrain.config.plan import ComponentSpec, OptimizerPlan, ParamFilter, plain
from plugtrain.config.reading.yaml_loader import LocatedDict, LocatedList
from plugtrain.config.sections import LoopSettings
from plugtrain.discovery import loading as plugins

RUN = """\
trainer:
  init:
    device: cpu
    model_dir: {model_dir}
    seed: 3
    model:
      MLP: {{in_features: 64, hidden: 16, out_features: 10}}
    optimizer:
      AdamW:
        lr: 0.01
        betas: [0.9, 0.95]
        weight_decay: 0.01
        params:
          - {{params: ["*fc1*"], tag: first}}
    schedulers:
      - SequentialLR:
          schedulers:
            - LinearLR: {{initial_learning_rate: 0.001, end_learning_rate: 0.01, total_iters: 2}}
            - ConstantLR: {{learning_rate: 0.01}}
          milestones: [2]
    loop: {{max_steps: {steps}}}
    checkpoint: {{steps: 2}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader: {{Digits: {{batch_size: 32}}}}
"""


@pytest.fixture
def registry(installed_registry):
    for kind, name in (("optimizer", "AdamW"), ("scheduler", "SequentialLR")):
        if name not in installed_registry.names(kind):
            pytest.skip(f"{name} is not installed")
    return installed_registry


def _plan(registry, tmp_path, steps=4):
    text = RUN.format(model_dir=tmp_path / "model", steps=steps)
    return plan_run(load_yaml(text.encode(), "run.yaml"), registry, "run.yaml")


def _located(value):
    if isinstance(value, LocatedDict | LocatedList):
        return True
    if isinstance(value, ComponentSpec):
        return _located(dict(value.arguments))
    if isinstance(value, dict):
        return any(_located(k) or _located(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_located(v) for v in value)
    return False


def test_the_plan_is_typed(registry, tmp_path):
    (trainer,) = _plan(registry, tmp_path).trainers
    assert trainer.backend.backend_type == "CPU"
    assert trainer.backend.path == "trainer.init.device"
    assert trainer.model == ComponentSpec(
        "model", "MLP", trainer.model.arguments, "trainer.init.model"
    )
    assert trainer.model.location == "run.yaml:7:7"
    assert isinstance(trainer.optimizer, OptimizerPlan)
    assert trainer.optimizer.param_filters == (ParamFilter(("*fc1*",), "first"),)
    assert trainer.optimizer.exclude_from_weight_decay is True
    assert "params" not in trainer.optimizer.spec.arguments
    assert trainer.loop == LoopSettings(max_steps=4)
    (sequential,) = trainer.schedulers
    children = sequential.arguments["schedulers"]
    assert [c.name for c in children] == ["LinearLR", "ConstantLR"]
    assert children[1].path == "trainer.init.schedulers[0].SequentialLR.schedulers[1]"
    assert trainer.fit is not None
    assert trainer.fit.ckpt_path_given is False
    assert trainer.steps == ("fit",)


def test_the_plan_holds_plain_values_only(registry, tmp_path):
    (trainer,) = _plan(registry, tmp_path).trainers
    betas = trainer.optimizer.spec.arguments["betas"]
    assert type(betas) is list
    assert betas == [0.9, 0.95]
    assert not _located(dict(trainer.config))
    assert type(trainer.config["optimizer"]["AdamW"]["betas"]) is list
    for spec in (trainer.model, trainer.optimizer.spec, *trainer.schedulers):
        assert not _located(spec)
        assert not _located(spec.call_arguments())
    assert plain(trainer.schedulers[0]) == {
        "SequentialLR": {
            "schedulers": [
                {
                    "LinearLR": {
                        "initial_learning_rate": 0.001,
                        "end_learning_rate": 0.01,
                        "total_iters": 2,
                    }
                },
                {"ConstantLR": {"learning_rate": 0.01}},
            ],
            "milestones": [2],
        }
    }


def test_the_plan_cannot_be_changed(registry, tmp_path):
    (trainer,) = _plan(registry, tmp_path).trainers
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        trainer.seed = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        trainer.optimizer.spec.arguments["lr"] = 1.0  # type: ignore[index]
    copy = trainer.optimizer.spec.call_arguments()
    copy["betas"].append(0.5)
    assert trainer.optimizer.spec.arguments["betas"] == [0.9, 0.95]


def test_loading_a_plan_leaves_the_process_registry_alone(tmp_path, monkeypatch):
    (tmp_path / "localplug.py").write_text(
        textwrap.dedent(
            """\
            import attrs
            from plugtrain import hookimpl
            from plugtrain.schema import arg

            @attrs.frozen
            class TinyArgs:
                \"\"\"A data loader of a local plugin.\"\"\"

                n: int = arg(1)

            @hookimpl
            def plugtrain_register_dataloaders(registry):
                registry.register("LocalTiny", "localplug:tiny", schema=TinyArgs)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run.yaml"
    run.write_text(
        "plugins: [localplug]\n"
        "trainer:\n"
        "  init: {model: {MLP: {in_features: 2, out_features: 2}}}\n"
        "  validate: {val_dataloader: {LocalTiny: {n: 2}}}\n"
    )
    settings, extra = plugins.current_settings(), plugins.current_extra()
    before = plugins.get_registry()
    plan, run_registry = load_plan(run, import_local=True)  # as fit and validate load it
    assert plan.plugins == ("localplug",)
    assert plan.trainers[0].validate.val_dataloader.name == "LocalTiny"
    assert "LocalTiny" in run_registry.names("dataloader")
    assert plugins.get_registry() is before
    assert "LocalTiny" not in before.names("dataloader")
    assert (plugins.current_settings(), plugins.current_extra()) == (settings, extra)


COUNTING_PLUGIN = '''\
"""Test double: an optimizer whose schema counts how often it is validated."""

import os

import attrs
import torch

from plugtrain import hookimpl
from plugtrain.schema import arg


@attrs.frozen
class CountedArgs:
    """SGD whose validations are counted."""

    lr: float = arg(help="learning rate")

    @staticmethod
    def cross_check(arguments):
        with open(os.environ["COUNT_FILE"], "a") as out:
            out.write(f"{os.getpid()}\\n")
        return ()


def counted(params, lr):
    return torch.optim.SGD(params, lr=lr)


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("Counted", "counting:counted", schema=CountedArgs)
'''


@pytest.mark.slow
def test_fit_validates_the_run_file_once_and_resumes_a_file_with_lists(registry, tmp_path):
    (tmp_path / "counting.py").write_text(COUNTING_PLUGIN)
    run = tmp_path / "run.yaml"
    text = RUN.format(model_dir=tmp_path / "model", steps=4)
    run.write_text(text)
    counted = tmp_path / "counted.yaml"
    counted.write_text(
        "plugins: [counting]\n"
        + text.replace("AdamW:", "Counted:")
        .replace("        betas: [0.9, 0.95]\n", "")
        .replace("        weight_decay: 0.01\n", "")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUGTRAIN_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["COUNT_FILE"] = str(tmp_path / "count.txt")

    def fit(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return run_plugtrain("fit", str(path), *extra, env=env, cwd=tmp_path, timeout=300)

    # (no schedulers: plot reads the optimizer's lr through its schema after fit)
    done = fit(
        counted,
        "--set",
        f"trainer.init.model_dir={tmp_path / 'counted'}",
        "--set",
        "trainer.init.schedulers=null",
    )
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "count.txt").read_text().splitlines()) == 1

    # betas: [0.9, 0.95] reaches the optimizer as a plain list; the checkpoints load weights-only
    first = fit(run)
    assert first.returncode == 0, first.stderr
    resumed = fit(run, "--set", "trainer.init.loop.max_steps=6")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr
    assert "checkpoint_4.mdl at step 4" in resumed.stderr
    import torch

    state = torch.load(tmp_path / "model" / "checkpoint_6.mdl", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["betas"] in ([0.9, 0.95], (0.9, 0.95))
    assert type(state["metadata"]["config"]["optimizer"]["AdamW"]["betas"]) is list
