"""Model Zoo 2.10's loop, checkpoint and logging keys, validate_all, and its leniencies.

Each key is validated (a run file or Python) and its behaviour checked on a real Trainer: the
steps evaluated at, the batches of an epoch, what a non-strict load logs, where checkpoints go.
"""

from __future__ import annotations

import logging
import textwrap
from typing import ClassVar

import pytest
import torch
from torch import nn

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.config import CheckpointSettings, load_yaml, plan_run
from plugtrain.discovery import loading as plugins
from plugtrain.errors import CheckpointError, CheckpointMismatchError, ConfigError
from plugtrain.registry._suggest import did_you_mean
from plugtrain.train.assembly.trainers import build_trainer
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint
from plugtrain.train.observability import console as console_module
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _sgd():
    return plugtrain.resolve("optimizer", "SGD")


def _trainer(tmp_path, model=None, **changes):
    sgd = _sgd()
    arguments = {
        "device": "CPU",
        "model_dir": tmp_path / "run",
        "model": model or (lambda: MLP(in_features=16, out_features=4, hidden=32)),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.05),
        "loop": {"max_steps": 8},
        "logging": {"log_steps": 1},
        "seed": 3,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def _data(split="train", batch_size=16, num_examples=128):
    return synthetic_loader(
        batch_size=batch_size,
        num_examples=num_examples,
        in_features=16,
        num_classes=4,
        split=split,
    )


class _EvalSteps:
    """A callback recording the global step of each evaluation."""

    def __init__(self):
        self.steps = []

    def on_validate_end(self, trainer, metrics):
        self.steps.append(trainer.global_step)


def _plan(text, tmp_path, name="run.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return plan_run(load_yaml(path.read_text(), str(path)), plugins.get_registry(), str(path))


def _problems(text, tmp_path):
    with pytest.raises(ConfigError) as caught:
        _plan(text, tmp_path)
    return [str(issue) for issue in caught.value.issues]


RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 1
    model: {{MLP: {{in_features: 64, out_features: 10, hidden: 16}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 4}}
    logging: {{log_steps: 1}}
{extra}
  fit:
    train_dataloader: {{Digits: {{batch_size: 32}}}}
"""


def _run(tmp_path, extra="", model_dir=None):
    return RUN.format(model_dir=model_dir or tmp_path / "run", extra=extra)


# -- loop.eval_frequency as a fraction -----------------------------------------------------------


def test_a_float_eval_frequency_evaluates_every_that_fraction_of_the_run(tmp_path):
    seen = _EvalSteps()
    trainer = _trainer(tmp_path, loop={"max_steps": 8, "eval_frequency": 0.25}, callbacks=[seen])
    trainer.fit(_data(), _data("val"), ckpt_path=None)
    assert seen.steps == [2, 4, 6, 8]


def test_a_float_eval_frequency_rounds_up_and_still_evaluates_at_the_end(tmp_path):
    seen = _EvalSteps()
    trainer = _trainer(tmp_path, loop={"max_steps": 10, "eval_frequency": 0.25}, callbacks=[seen])
    trainer.fit(_data(), _data("val"), ckpt_path=None)
    assert seen.steps == [3, 6, 9, 10]  # ceil(0.25 * 10) = 3, as Model Zoo's schedule


def test_a_float_eval_frequency_counts_from_where_a_resumed_fit_starts(tmp_path):
    first = _trainer(tmp_path, loop={"max_steps": 4}, checkpoint={"steps": 4})
    first.fit(_data(), ckpt_path=None)
    seen = _EvalSteps()
    again = _trainer(tmp_path, loop={"max_steps": 12, "eval_frequency": 0.5}, callbacks=[seen])
    again.fit(_data(), _data("val"))  # resumes at step 4: 8 steps left, every 4
    assert seen.steps == [8, 12]


def test_an_int_eval_frequency_keeps_counting_global_steps(tmp_path):
    seen = _EvalSteps()
    trainer = _trainer(tmp_path, loop={"max_steps": 6, "eval_frequency": 1}, callbacks=[seen])
    trainer.fit(_data(), _data("val"), ckpt_path=None)
    assert seen.steps == [1, 2, 3, 4, 5, 6]  # 1 is an int: every step, not the whole run


def test_a_float_eval_frequency_above_1_is_refused_and_0_means_at_the_end(tmp_path):
    text = _run(tmp_path).replace(
        "loop: {max_steps: 4}", "loop: {max_steps: 4, eval_frequency: 1.5}"
    )
    (problem,) = _problems(text, tmp_path)
    assert problem.startswith(f"{tmp_path / 'run.yaml'}:8:26: trainer.init.loop.eval_frequency:")
    assert "a float eval_frequency is a fraction of the fit's steps, in (0.0, 1.0]" in problem
    negative = text.replace("eval_frequency: 1.5", "eval_frequency: -0.5")
    (problem,) = _problems(negative, tmp_path)
    assert "must be >= 0, got -0.5" in problem
    (plan,) = _plan(text.replace("eval_frequency: 1.5", "eval_frequency: 0.0"), tmp_path).trainers
    assert plan.loop.eval_frequency == 0.0


# -- loop.steps_per_epoch -------------------------------------------------------------------------


class _Counted:
    """Ten numbered batches; counts how often an epoch starts and which batches were read."""

    def __init__(self):
        self.passes = 0
        self.read = []
        self.batches = [
            (torch.full((4, 16), float(i)), torch.zeros(4, dtype=torch.int64)) for i in range(10)
        ]

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        self.passes += 1
        for batch in self.batches:
            self.read.append(int(batch[0][0, 0]))
            yield batch


def test_steps_per_epoch_bounds_an_epoch_and_num_epochs_counts_them(tmp_path):
    data = _Counted()
    trainer = _trainer(tmp_path, loop={"num_epochs": 2, "steps_per_epoch": 3})
    trainer.fit(data, ckpt_path=None)
    assert trainer.global_step == 6
    assert data.passes == 2
    assert data.read == [0, 1, 2, 0, 1, 2]  # the second epoch starts the loader again


def test_steps_per_epoch_counts_optimizer_steps_under_grad_accumulation(tmp_path):
    data = _Counted()
    loop = {"num_epochs": 2, "steps_per_epoch": 2, "grad_accum_steps": 2}
    trainer = _trainer(tmp_path, loop=loop)
    trainer.fit(data, ckpt_path=None)
    assert trainer.global_step == 4
    assert data.read == [0, 1, 2, 3, 0, 1, 2, 3]


def test_steps_per_epoch_beyond_one_pass_is_an_error(tmp_path):
    trainer = _trainer(tmp_path, loop={"num_epochs": 1, "steps_per_epoch": 11})
    with pytest.raises(ConfigError, match="steps_per_epoch 11 needs 11 batches per epoch, but"):
        trainer.fit(_Counted(), ckpt_path=None)


def test_steps_per_epoch_must_be_positive(tmp_path):
    text = _run(tmp_path).replace(
        "loop: {max_steps: 4}", "loop: {max_steps: 4, steps_per_epoch: 0}"
    )
    (problem,) = _problems(text, tmp_path)
    assert "trainer.init.loop.steps_per_epoch: must be > 0, got 0" in problem


# -- checkpoint.disable_strict_checkpoint_loading ------------------------------------------------


class _Wider(nn.Module):
    """MLP's layers plus one more: keys the MLP's checkpoint lacks."""

    def __init__(self):
        super().__init__()
        self.body = MLP(in_features=16, out_features=4, hidden=32)
        self.extra = nn.Linear(4, 4)

    def forward(self, inputs):
        return self.extra(self.body(inputs))


class _Narrower(nn.Module):
    """Only the MLP of _Wider: the checkpoint of a _Wider holds keys it does not know."""

    def __init__(self):
        super().__init__()
        self.body = MLP(in_features=16, out_features=4, hidden=32)

    def forward(self, inputs):
        return self.body(inputs)


def test_a_strict_load_refuses_a_checkpoint_of_another_model(tmp_path):
    _trainer(tmp_path, model=_Narrower).fit(_data(), ckpt_path=None)
    saved = tmp_path / "run" / "checkpoint_8.mdl"
    wider = _trainer(tmp_path / "b", model=_Wider)
    with pytest.raises(CheckpointMismatchError, match=r"model\.extra\.weight: missing"):
        wider.fit(_data(), ckpt_path=saved)


def test_a_non_strict_load_reports_missing_keys_and_trains_on(tmp_path, caplog):
    _trainer(tmp_path, model=_Narrower).fit(_data(), ckpt_path=None)
    saved = tmp_path / "run" / "checkpoint_8.mdl"
    settings = {"disable_strict_checkpoint_loading": True}
    wider = _trainer(tmp_path / "b", model=_Wider, checkpoint=settings, loop={"max_steps": 12})
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        wider.fit(_data(), ckpt_path=saved)
    assert wider.global_step == 12  # resumed at 8, trained on
    text = caplog.text
    assert "loaded non-strictly" in text
    assert "missing from the checkpoint (kept as initialised): extra.weight, extra.bias" in text
    assert "the optimizer state was not loaded" in text
    shared = load_checkpoint(saved)["model"]["body.fc1.weight"]
    assert not torch.equal(wider.model.body.fc1.weight.detach(), torch.zeros_like(shared))


def test_a_non_strict_load_reports_unexpected_keys(tmp_path, caplog):
    _trainer(tmp_path, model=_Wider).fit(_data(), ckpt_path=None)
    saved = tmp_path / "run" / "checkpoint_8.mdl"
    narrow = _trainer(
        tmp_path / "b",
        model=_Narrower,
        checkpoint={"disable_strict_checkpoint_loading": True},
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        narrow.validate(_data("val"), ckpt_path=saved)
    weights = load_checkpoint(saved)["model"]
    assert torch.equal(narrow.model.body.fc1.weight.detach(), weights["body.fc1.weight"])
    assert "in the checkpoint but not in the model (ignored): extra.weight, extra.bias" in (
        caplog.text
    )


def test_a_non_strict_load_still_refuses_another_shape(tmp_path):
    _trainer(tmp_path).fit(_data(), ckpt_path=None)
    saved = tmp_path / "run" / "checkpoint_8.mdl"
    other = _trainer(
        tmp_path / "b",
        model=lambda: MLP(in_features=16, out_features=4, hidden=8),
        checkpoint={"disable_strict_checkpoint_loading": True},
    )
    with pytest.raises(CheckpointMismatchError, match="shape"):
        other.fit(_data(), ckpt_path=saved)


# -- checkpoint.checkpoint_root and strict_version -----------------------------------------------


def test_checkpoint_root_holds_the_checkpoints_and_autoload_reads_it(tmp_path):
    root = tmp_path / "ckpts"
    settings = {"checkpoint_root": str(root), "steps": 4}
    _trainer(tmp_path, checkpoint=settings).fit(_data())
    assert sorted(p.name for p in root.glob("checkpoint_*")) == [
        "checkpoint_4.mdl",
        "checkpoint_8.mdl",
    ]
    assert not list((tmp_path / "run").glob("checkpoint_*"))
    again = _trainer(tmp_path, checkpoint=settings, loop={"max_steps": 10})
    again.fit(_data())
    assert again.global_step == 10
    assert (root / "checkpoint_10.mdl").is_file()


def test_a_url_checkpoint_root_is_refused(tmp_path):
    text = _run(tmp_path, "    checkpoint: {checkpoint_root: 's3://bucket/run'}")
    (problem,) = _problems(text, tmp_path)
    assert "checkpoint_root 's3://bucket/run' is a URL (S3)" in problem


def _older_checkpoint(tmp_path):
    _trainer(tmp_path).fit(_data(), ckpt_path=None)
    path = tmp_path / "run" / "checkpoint_8.mdl"
    state = load_checkpoint(path)
    state["metadata"]["plugtrain"] = "0.0.1"
    save_checkpoint(path, state)
    return path


def test_strict_version_refuses_a_checkpoint_of_another_version(tmp_path):
    path = _older_checkpoint(tmp_path)
    trainer = _trainer(tmp_path / "b")
    with pytest.raises(CheckpointMismatchError) as caught:
        trainer.validate(_data("val"), ckpt_path=path)
    assert "written by plugtrain 0.0.1" in str(caught.value)
    assert "strict_version: false" in str(caught.value)


def test_strict_version_false_loads_it_with_a_warning(tmp_path, caplog):
    path = _older_checkpoint(tmp_path)
    trainer = _trainer(tmp_path / "b", checkpoint={"strict_version": False})
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        trainer.validate(_data("val"), ckpt_path=path)
    assert trainer.global_step == 8
    assert "written by plugtrain 0.0.1" in caplog.text
    assert "loading it anyway (strict_version: false)" in caplog.text


# -- logging.wsc_log_level and enable_act_frequency ----------------------------------------------


def test_csx_only_logging_keys_are_said_once_to_have_no_effect(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(console_module, "_SAID", set())
    settings = {"log_steps": 1, "wsc_log_level": {"crd": "DEBUG"}, "enable_act_frequency": True}
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        _trainer(tmp_path, logging=settings)
        _trainer(tmp_path, logging=settings)
    messages = [r.getMessage() for r in caplog.records]
    wsc = [m for m in messages if m.startswith("logging.wsc_log_level has no effect on CPU")]
    act = [m for m in messages if m.startswith("logging.enable_act_frequency has no effect on CPU")]
    assert len(wsc) == 1
    assert len(act) == 1


@pytest.mark.slow
def test_log_level_sets_the_level_of_the_command_lines_log(tmp_path):
    import subprocess
    import sys

    def fit(level):
        run = tmp_path / f"{level}.yaml"
        logging_line = f"    logging: {{log_steps: 1, log_level: {level}}}"
        text = _run(tmp_path, model_dir=tmp_path / level)
        run.write_text(text.replace("    logging: {log_steps: 1}", logging_line))
        command = [sys.executable, "-m", "plugtrain", "fit", str(run)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "plugtrain: step 1/4 loss" in fit("INFO")
    assert "step 1/4" not in fit("WARNING")


def test_logging_keys_are_validated(tmp_path):
    good = "    logging: {log_steps: 1, wsc_log_level: {crd: DEBUG, execute: 20}}"
    text = _run(tmp_path).replace("    logging: {log_steps: 1}", good)
    (plan,) = _plan(text, tmp_path).trainers
    assert plan.logging.wsc_log_level == {"crd": "DEBUG", "execute": 20}
    bad = "    logging: {log_steps: 1, enable_act_frequency: sometimes}"
    (problem,) = _problems(_run(tmp_path).replace("    logging: {log_steps: 1}", bad), tmp_path)
    assert "enable_act_frequency" in problem


# -- validate_all (Python) -------------------------------------------------------------------------


def _fitted(tmp_path, steps=(5, 10)):
    trainer = _trainer(tmp_path, checkpoint={"steps": steps[0]}, loop={"max_steps": steps[-1]})
    trainer.fit(_data(), ckpt_path=None)
    return tmp_path / "run"


def test_validate_all_evaluates_every_checkpoint_on_every_loader_in_step_order(tmp_path):
    model_dir = _fitted(tmp_path)
    loaders = {"small": _data("val", num_examples=32), "big": _data("val", num_examples=64)}
    records = _trainer(tmp_path).validate_all(loaders)
    assert [(r["step"], r["dataloader"]) for r in records] == [
        (5, "small"),
        (5, "big"),
        (10, "small"),
        (10, "big"),
    ]
    assert records[0]["checkpoint"] == str(model_dir / "checkpoint_5.mdl")
    expected = _trainer(tmp_path / "one").validate(
        _data("val", num_examples=64), ckpt_path=model_dir / "checkpoint_5.mdl"
    )
    assert records[1]["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    assert records[1]["accuracy"] == expected["accuracy"]


def test_validate_all_expands_globs_in_step_order_not_name_order(tmp_path):
    model_dir = _fitted(tmp_path)
    records = _trainer(tmp_path).validate_all(
        [_data("val")], ckpt_paths=str(model_dir / "checkpoint_*.mdl")
    )
    assert [r["step"] for r in records] == [5, 10]  # "checkpoint_10" sorts before "_5"
    assert [r["dataloader"] for r in records] == ["0", "0"]


def test_validate_all_with_a_list_and_none(tmp_path):
    model_dir = _fitted(tmp_path)
    trainer = _trainer(tmp_path)
    records = trainer.validate_all(_data("val"), ckpt_paths=[model_dir / "checkpoint_10.mdl"])
    assert [r["step"] for r in records] == [10]
    untrained = _trainer(tmp_path / "fresh").validate_all(_data("val"), ckpt_paths=None)
    assert untrained[0]["checkpoint"] is None
    assert untrained[0]["step"] == 0


def test_validate_all_names_a_checkpoint_that_fails_to_load(tmp_path):
    model_dir = _fitted(tmp_path)
    broken = model_dir / "checkpoint_7.mdl"
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"checkpoint_7\.mdl"):
        _trainer(tmp_path).validate_all(
            [_data("val")], ckpt_paths=[model_dir / "checkpoint_5.mdl", broken]
        )
    with pytest.raises(CheckpointError, match=r"nothing\.mdl: no such checkpoint file"):
        _trainer(tmp_path).validate_all([_data("val")], ckpt_paths=str(tmp_path / "nothing.mdl"))
    with pytest.raises(CheckpointError, match="matches no file"):
        _trainer(tmp_path).validate_all([_data("val")], ckpt_paths=str(tmp_path / "x*.mdl"))


def test_validate_all_without_checkpoints_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint to validate"):
        _trainer(tmp_path).validate_all([_data("val")])


# -- validate_all (run files) ----------------------------------------------------------------------


VALIDATE_ALL = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 64, out_features: 10, hidden: 16}}}}
  validate_all:
{section}
"""


def test_validate_all_sections_plan_one_loader_or_a_list(tmp_path):
    one = "    val_dataloaders: {Digits: {batch_size: 64, split: val}}"
    (plan,) = _plan(VALIDATE_ALL.format(model_dir=tmp_path, section=one), tmp_path).trainers
    assert plan.steps == ("validate_all",)
    assert [s.name for s in plan.validate_all.val_dataloaders] == ["Digits"]
    assert plan.validate_all.ckpt_paths_given is False
    many = (
        "    val_dataloaders:\n"
        "    - {Digits: {batch_size: 64, split: val}}\n"
        "    - data_processor: Digits\n"
        "      batch_size: 32\n"
        "    ckpt_paths: [a.mdl, 'b/*.mdl']"
    )
    (plan,) = _plan(VALIDATE_ALL.format(model_dir=tmp_path, section=many), tmp_path).trainers
    assert [s.name for s in plan.validate_all.val_dataloaders] == ["Digits", "Digits"]
    assert plan.validate_all.ckpt_paths == ("a.mdl", "b/*.mdl")
    null = "    val_dataloaders: {Digits: {batch_size: 64}}\n    ckpt_paths: null"
    (plan,) = _plan(VALIDATE_ALL.format(model_dir=tmp_path, section=null), tmp_path).trainers
    assert plan.validate_all.ckpt_paths is None
    assert plan.validate_all.ckpt_paths_given


def test_validate_all_sections_are_validated(tmp_path):
    section = "    val_dataloaders: {Digits: {batch_size: 0}}\n    ckpt_path: a.mdl"
    problems = _problems(VALIDATE_ALL.format(model_dir=tmp_path, section=section), tmp_path)
    assert any("val_dataloaders[0].Digits.batch_size: must be > 0" in p for p in problems)
    unknown = [p for p in problems if "unknown argument 'ckpt_path'" in p]
    assert unknown
    assert "Accepted: val_dataloaders, ckpt_paths" in unknown[0]


# -- spellings: {name: X} and {data_processor: X} ------------------------------------------------


def test_model_zoo_spellings_of_components_are_accepted(tmp_path):
    text = """\
    trainer:
      init:
        device: CPU
        model:
          name: MLP
          in_features: 64
          out_features: 10
        optimizer: {SGD: {lr: 0.1}}
        loop: {max_steps: 2}
      fit:
        train_dataloader:
          data_processor: Digits
          batch_size: 32
    """
    (plan,) = _plan(text, tmp_path).trainers
    assert plan.model.name == "MLP"
    assert dict(plan.model.arguments) == {"in_features": 64, "out_features": 10}
    assert plan.fit.train_dataloader.name == "Digits"
    assert dict(plan.fit.train_dataloader.arguments) == {"batch_size": 32}


def test_a_misspelt_name_is_placed_at_the_name_value(tmp_path):
    text = """\
    trainer:
      init:
        device: CPU
        model:
          name: MPL
          in_features: 64
      validate:
        val_dataloader:
          data_processor: Digits
          batch_sise: 32
    """
    problems = _problems(text, tmp_path)
    name = [p for p in problems if "MPL" in p]
    assert name
    assert name[0].startswith(f"{tmp_path / 'run.yaml'}:5:13:")
    assert "Did you mean 'MLP'?" in name[0]
    size = [p for p in problems if "batch_sise" in p]
    assert size
    assert size[0].startswith(f"{tmp_path / 'run.yaml'}:10:7:")


# -- YAML 1.2 floats -------------------------------------------------------------------------------


def test_yaml_floats_without_a_dot_are_floats_with_their_position():
    data = load_yaml("lr: 6e-06\nwd: 2e-4\neps: 1E-3\nsteps: 10\nname: 1e\n", "f.yaml")
    assert data == {"lr": 6e-06, "wd": 2e-4, "eps": 1e-3, "steps": 10, "name": "1e"}
    assert [type(v) for v in data.values()] == [float, float, float, int, str]
    assert str(data.value_marks["lr"]) == "f.yaml:1:5"
    assert str(data.value_marks["wd"]) == "f.yaml:2:5"


def test_a_yaml_float_in_a_run_file_is_a_float_argument(tmp_path):
    text = _run(tmp_path).replace("SGD: {lr: 0.1}", "SGD: {lr: 6e-06, weight_decay: 2e-4}")
    (plan,) = _plan(text, tmp_path).trainers
    assert dict(plan.optimizer.spec.arguments) == {"lr": 6e-06, "weight_decay": 2e-4}


# -- optimizer: Model Zoo's default lr, ignored keys -----------------------------------------------


def test_an_optimizer_without_lr_gets_model_zoos_default_in_run_files(tmp_path):
    text = _run(tmp_path).replace("SGD: {lr: 0.1}", "SGD: {momentum: 0.9}")
    plan = _plan(text, tmp_path)
    assert plan.trainers[0].optimizer.spec.arguments["lr"] == 0.1
    (warning,) = [str(w) for w in plan.warnings]
    assert warning.startswith(f"{tmp_path / 'run.yaml'}:7:17: trainer.init.optimizer.SGD:")
    assert "no lr written: Model Zoo's default 0.1 is used" in warning
    written = _plan(_run(tmp_path).replace("lr: 0.1", "learning_rate: 0.2"), tmp_path)
    assert written.warnings == ()
    assert "lr" not in written.trainers[0].optimizer.spec.arguments  # the alias, as written


def test_no_lr_is_not_said_where_an_untagged_lr_scheduler_sets_every_group(tmp_path):
    base = _run(tmp_path).replace("SGD: {lr: 0.1}", "SGD: {momentum: 0.9}")
    schedules = (
        "    schedulers:\n"
        "      - LinearLR: {initial_learning_rate: 0.1, end_learning_rate: 0.01, total_iters: 4"
    )
    untagged = base.replace("    loop:", schedules + "}\n    loop:")
    assert _plan(untagged, tmp_path).warnings == ()
    tagged = base.replace("    loop:", schedules + ", param_group_tags: some}\n    loop:")
    (warning,) = [str(w) for w in _plan(tagged, tmp_path).warnings]
    assert "no lr written: Model Zoo's default 0.1 is used" in warning


def test_python_optimizer_mappings_keep_the_plugins_own_default():
    from plugtrain.config.validation.validate import plan_component

    spec = plan_component(plugins.get_registry(), "optimizer", {"Adam": {}})
    assert "lr" not in spec.arguments  # Adam's own 1e-3 applies


def test_correct_bias_on_adam_is_a_warning_with_its_position(tmp_path):
    text = _run(tmp_path).replace(
        "optimizer: {SGD: {lr: 0.1}}",
        "optimizer:\n      Adam:\n        lr: 0.01\n        correct_bias: true",
    )
    plan = _plan(text, tmp_path)
    (warning,) = [str(w) for w in plan.warnings]
    assert warning.startswith(
        f"{tmp_path / 'run.yaml'}:10:9: trainer.init.optimizer.Adam.correct_bias: has no effect:"
    )
    assert "Model Zoo accepts correct_bias on Adam and ignores it" in warning
    assert "correct_bias" not in plan.trainers[0].optimizer.spec.arguments
    adamw = _plan(text.replace("Adam:", "AdamW:"), tmp_path)
    assert adamw.warnings == ()
    assert adamw.trainers[0].optimizer.spec.arguments["correct_bias"]
    other = text.replace("correct_bias: true", "correct_bais: true")
    (problem,) = _problems(other, tmp_path)
    assert "unknown argument 'correct_bais'" in problem


def test_check_prints_the_warnings_on_stderr(tmp_path, capsys):
    from plugtrain.cli import main

    path = tmp_path / "run.yaml"
    adam = "Adam: {lr: 0.01, correct_bias: false}"
    path.write_text(_run(tmp_path).replace("SGD: {lr: 0.1}", adam))
    assert main(["check", str(path)]) == 0
    captured = capsys.readouterr()
    assert "OK (1 trainer)" in captured.out
    assert f"plugtrain: warning: {path}:7:34: trainer.init.optimizer.Adam.correct_bias" in (
        captured.err
    )


# -- optimizer.adjust_learning_rate ----------------------------------------------------------------


ADJUSTED = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 4
    model: {{MLP: {{in_features: 64, out_features: 10, hidden: 16}}}}
    optimizer:
      SGD:
        lr: 0.1
        adjust_learning_rate: {{fc1: 0.5, 'fc2.w*': 0.25}}
    loop: {{max_steps: 1}}
    logging: {{log_steps: 1}}
{schedulers}
  fit:
    train_dataloader: {{Digits: {{batch_size: 32, shuffle: false}}}}
"""


def _adjusted(tmp_path, schedulers=""):
    text = ADJUSTED.format(model_dir=tmp_path / "run", schedulers=schedulers)
    plan = _plan(text, tmp_path)
    return build_trainer(plan.trainers[0], plugins.get_registry(), {}), plan


def _lr_of(trainer):
    found = {}
    for group in trainer.optimizer.param_groups:
        for name in group["param_names"]:
            found[name] = (group["lr"], group["adjust_learning_rate"])
    return found


def test_adjust_learning_rate_puts_factors_on_the_matching_params(tmp_path):
    trainer, plan = _adjusted(tmp_path)
    assert plan.trainers[0].optimizer.adjust_learning_rate == (("fc1", 0.5), ("fc2.w*", 0.25))
    assert _lr_of(trainer) == {
        "fc1.weight": (0.05, 0.5),
        "fc1.bias": (0.05, 0.5),
        "fc2.weight": (0.025, 0.25),
        "fc2.bias": (0.1, 1.0),
    }


def test_the_optimizer_steps_with_the_adjusted_learning_rate(tmp_path):
    trainer, _ = _adjusted(tmp_path)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    from plugtrain.builtin.data import digits_loader

    trainer.fit(digits_loader(batch_size=32, shuffle=False), ckpt_path=None)
    expected_lr = {"fc1.weight": 0.05, "fc1.bias": 0.05, "fc2.weight": 0.025, "fc2.bias": 0.1}
    for name, param in trainer.model.named_parameters():
        step = before[name] - param.detach()
        torch.testing.assert_close(step, expected_lr[name] * param.grad, rtol=1e-5, atol=1e-8)


def test_an_lr_scheduler_is_scaled_per_group(tmp_path):
    schedulers = (
        "    schedulers:\n"
        "    - LinearLR: {initial_learning_rate: 0.2, end_learning_rate: 0.0, total_iters: 4}"
    )
    trainer, _ = _adjusted(tmp_path, schedulers)
    (scheduler,) = trainer.schedulers
    assert type(scheduler).__name__ == "ScalePerParamLR"
    assert _lr_of(trainer)["fc1.weight"] == (pytest.approx(0.1), 0.5)
    assert _lr_of(trainer)["fc2.bias"] == (pytest.approx(0.2), 1.0)
    scheduler.step()
    assert _lr_of(trainer)["fc2.weight"][0] == pytest.approx(0.15 * 0.25)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("adjust_learning_rate: 0.5", "must be a mapping {name pattern: factor}"),
        ("adjust_learning_rate: {fc1: -1}", "a factor is a finite number >= 0, got -1"),
        ("adjust_learning_rate: {fc1: big}", "a factor is a finite number >= 0, got 'big'"),
    ],
)
def test_bad_adjust_learning_rate_is_refused(tmp_path, written, expected):
    text = ADJUSTED.format(model_dir=tmp_path, schedulers="").replace(
        "adjust_learning_rate: {fc1: 0.5, 'fc2.w*': 0.25}", written
    )
    (problem,) = _problems(text, tmp_path)
    assert "trainer.init.optimizer.SGD.adjust_learning_rate" in problem
    assert expected in problem


def test_a_parameter_matched_by_two_factors_is_refused(tmp_path):
    from plugtrain.bases.param_groups import adjust_learning_rate_groups, build_param_groups

    model = MLP(in_features=4, out_features=2, hidden=3)
    with pytest.raises(ConfigError, match=r"fc1\.weight is matched by several factors"):
        adjust_learning_rate_groups(build_param_groups(model), [("fc1", 0.5), ("weight", 2.0)])


def test_model_zoo_group_names_and_unmatched_keys(tmp_path):
    from plugtrain.bases.param_groups import adjust_learning_rate_groups, build_param_groups

    class Named(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(5, 3)
            self.decoder = nn.ModuleDict({"dense": nn.Linear(3, 3)})

    model = Named()
    groups, unused = adjust_learning_rate_groups(
        build_param_groups(model, exclude_from_weight_decay=False),
        [("embedding", 0.5), ("decoder_kernel", 0.25), ("absent", 3.0)],
        model,
    )
    factors = {n: g["adjust_learning_rate"] for g in groups for n in g["param_names"]}
    assert factors == {
        "embedding.weight": 0.5,
        "decoder.dense.weight": 0.25,
        "decoder.dense.bias": 1.0,
    }
    assert unused == ["absent"]


# -- suggestions -----------------------------------------------------------------------------------


def test_no_suggestion_points_at_a_key_with_another_meaning():
    assert did_you_mean("adjust_learning_rate", ["learning_rate", "lr"]) == ""
    assert did_you_mean("validate_all", ["validate", "fit"]) == ""
    keys = ["steps", "save_initial_checkpoint", "checkpoint_name"]
    assert did_you_mean("disable_strict_checkpoint_loading", keys) == ""
    assert did_you_mean("learing_rate", ["learning_rate"]) == " Did you mean 'learning_rate'?"
    assert did_you_mean("max_step", ["max_steps"]) == " Did you mean 'max_steps'?"


def test_model_zoo_keys_plugtrain_lacks_are_said_plainly(tmp_path):
    text = _run(tmp_path, "    autorestart: {max_num_restarts: 2}")
    (problem,) = _problems(text, tmp_path)
    assert "'autorestart' is the CSX appliance's automatic restart, which plugtrain does" in problem
    assert "Did you mean" not in problem
    old = "train_input: {batch_size: 8}\n" + _run(tmp_path)
    problems = _problems(old, tmp_path)
    assert any("Model Zoo's pre-2.0 params format" in p for p in problems)


def test_an_unknown_key_in_the_trainer_stays_an_error_without_a_wrong_hint(tmp_path):
    text = _run(tmp_path) + "  validate_al:\n    val_dataloaders: {Digits: {batch_size: 8}}\n"
    problems = _problems(text, tmp_path)
    (unknown,) = [p for p in problems if "validate_al'" in p]
    assert "Did you mean 'validate_all'?" in unknown


def test_run_files_only_spend_what_they_write(tmp_path):
    """Keys this file adds leave plain run files as they were (no warnings, same plan)."""
    plan = _plan(_run(tmp_path), tmp_path)
    assert plan.warnings == ()
    (trainer,) = plan.trainers
    assert trainer.loop.steps_per_epoch is None
    assert trainer.loop.eval_frequency is None
    assert trainer.checkpoint is None  # the Trainer's defaults: Model Zoo's
    defaults = CheckpointSettings()
    assert defaults.checkpoint_root is None
    assert defaults.strict_version
    assert not defaults.disable_strict_checkpoint_loading
    assert trainer.validate_all is None


@pytest.mark.slow
def test_plugtrain_validate_all_on_the_command_line(tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run.yaml"
    text = _run(tmp_path).replace(
        "    logging: {log_steps: 1}", "    logging: {log_steps: 1}\n    checkpoint: {steps: 2}"
    )
    text += (
        "  validate_all:\n"
        "    val_dataloaders:\n"
        "    - {Digits: {batch_size: 64, split: val}}\n"
        "    - {Digits: {batch_size: 64, split: train}}\n"
    )
    run.write_text(text)

    def plugtrain(*args):
        command = [sys.executable, "-m", "plugtrain", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)

    assert plugtrain("fit", str(run)).returncode == 0
    done = plugtrain("validate_all", str(run))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    model_dir = tmp_path / "run"
    assert [line.split(": loss")[0] for line in lines] == [
        f"trainer 0: validation of {model_dir}/checkpoint_2.mdl (step 2) on 0:Digits",
        f"trainer 0: validation of {model_dir}/checkpoint_2.mdl (step 2) on 1:Digits",
        f"trainer 0: validation of {model_dir}/checkpoint_4.mdl (step 4) on 0:Digits",
        f"trainer 0: validation of {model_dir}/checkpoint_4.mdl (step 4) on 1:Digits",
    ]
    rows = (model_dir / "metrics.jsonl").read_text().splitlines()
    assert sum('"split": "validate_all/1:Digits"' in row for row in rows) == 2
    plain = tmp_path / "plain.yaml"
    plain.write_text(_run(tmp_path))
    nothing = plugtrain("validate_all", str(plain))
    assert nothing.returncode == 2
    assert "nothing to do: no trainer has a validate_all section" in nothing.stderr


def test_the_editor_schema_accepts_a_trainer_with_only_validate_all(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from plugtrain.authoring.jsonschema import run_file_schema

    schema = run_file_schema(plugins.get_registry())
    data = {
        "trainer": {
            "init": {"device": "CPU", "model": {"MLP": {"in_features": 64, "out_features": 10}}},
            "validate_all": {
                "val_dataloaders": [{"Digits": {"batch_size": 8}}],
                "ckpt_paths": ["a.mdl"],
            },
        }
    }
    jsonschema.Draft202012Validator(schema).validate(data)
    data["trainer"].pop("validate_all")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(data)


class _Factored(MLP):
    """An MLP declaring its own learning-rate factors (the optional Model members)."""

    lr_adjustment_groups: ClassVar[dict[str, tuple[str, ...]]] = {"hidden": ("fc1.*",)}

    def learning_rate_factors(self) -> dict[str, float]:
        return {"hidden": 0.25, "fc2.weight": 0.5, "fc2.bias": 2.0}


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (None, {"fc1.weight": 0.25, "fc1.bias": 0.25, "fc2.weight": 0.5, "fc2.bias": 2.0}),
        # the run file's entries win; the model's apply to what they do not name
        ("{fc1: 0.5, 'fc2.w*': 0.25}", {"fc1.weight": 0.5, "fc1.bias": 0.5, "fc2.weight": 0.25,
                                        "fc2.bias": 2.0}),
    ],
)  # fmt: skip
def test_a_models_learning_rate_factors_are_defaults_under_the_run_files(
    tmp_path, written, expected
):
    from plugtrain.train.assembly.trainers import optimizer_factory

    text = ADJUSTED.format(model_dir=tmp_path / "run", schedulers="")
    if written is None:
        text = text.replace("        adjust_learning_rate: {fc1: 0.5, 'fc2.w*': 0.25}\n", "")
    else:
        text = text.replace("{fc1: 0.5, 'fc2.w*': 0.25}", written)
    plan = _plan(text, tmp_path).trainers[0]
    model = _Factored(in_features=64, out_features=10, hidden=16)
    optimizer = optimizer_factory(plugins.get_registry(), plan.optimizer)(model)
    found = {n: (g["lr"], g["adjust_learning_rate"]) for g in optimizer.param_groups for n in
             g["param_names"]}  # fmt: skip
    assert found == {name: (pytest.approx(0.1 * f), f) for name, f in expected.items()}


def test_a_model_with_no_factors_gets_plain_groups(tmp_path):
    from plugtrain.train.assembly.trainers import optimizer_factory

    class Plain(MLP):
        def learning_rate_factors(self) -> dict[str, float]:
            return {}

    text = ADJUSTED.format(model_dir=tmp_path / "run", schedulers="")
    text = text.replace("        adjust_learning_rate: {fc1: 0.5, 'fc2.w*': 0.25}\n", "")
    plan = _plan(text, tmp_path).trainers[0]
    model = Plain(in_features=64, out_features=10, hidden=16)
    optimizer = optimizer_factory(plugins.get_registry(), plan.optimizer)(model)
    assert all("adjust_learning_rate" not in group for group in optimizer.param_groups)
