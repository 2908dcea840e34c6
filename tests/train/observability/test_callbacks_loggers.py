"""Callbacks and loggers: run-file keys, Name: null, hook order, state in checkpoints, loggers.

Everything runs for real: a tiny MLP trains on CPU, checkpoints are written and resumed, and the
default loggers write the metrics files. The components of plugtrain-callbacks are tested in
``plugins/callbacks/tests``; here the callbacks are small classes written in this file.
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.config import check_run, load_yaml
from plugtrain.config.plan import ComponentSpec, RemovedDefault
from plugtrain.errors import ConfigError
from plugtrain.protocols import CALLBACK_HOOKS
from plugtrain.train.checkpointing.state.parts import PARTS
from plugtrain.train.checkpointing.storage.archive import load_checkpoint
from plugtrain.train.observability.loggers import MetricsFilesLogger, ProgressLogger
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _trainer(tmp_path, **changes):
    sgd = plugtrain.resolve("optimizer", "SGD")
    arguments = {
        "device": "CPU",
        "model_dir": tmp_path / "run",
        "model": lambda: MLP(in_features=8, out_features=3, hidden=16),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.1, momentum=0.9),
        "loop": {"max_steps": 4, "eval_frequency": 2, "eval_steps": 1},
        "checkpoint": {"steps": 2},
        "logging": {"log_steps": 2},
        "seed": 7,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def _data(split="train"):
    return synthetic_loader(
        batch_size=8, num_examples=64, in_features=8, num_classes=3, split=split
    )


class Recorder:
    """Records every protocol call as (hook, step)."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if name not in CALLBACK_HOOKS:
            raise AttributeError(name)

        def record(trainer, *args):
            self.calls.append((name, trainer.global_step))

        return record


class Counter:
    """A callback with state: counts logged training records across resumes."""

    def __init__(self):
        self.records = 0
        self.loaded = None

    def on_train_step_end(self, trainer, metrics):
        self.records += 1
        metrics["records_seen"] = float(self.records)

    def state_dict(self):
        return {"records": self.records}

    def load_state_dict(self, state):
        self.loaded = dict(state)
        self.records = state["records"]


class ListLogger:
    """A logger keeping what it was given."""

    def __init__(self):
        self.records = []
        self.closed = 0

    def log_metrics(self, step, split, metrics):
        self.records.append((step, split, dict(metrics)))

    def close(self):
        self.closed += 1


def _rows(model_dir):
    path = model_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the Trainer from Python ----------------------------------------------------------------


def test_hook_order_of_a_fit(tmp_path):
    recorder = Recorder()
    trainer = _trainer(tmp_path, callbacks=[recorder])
    trainer.fit(_data(), _data("val"))
    expected = [
        ("on_model_built", 0),  # when the Trainer was created
        ("on_fit_start", 0),
        ("on_train_step_start", 0),
        ("on_before_optimizer_step", 0),
        ("on_after_optimizer_step", 0),
        ("on_train_step_start", 1),
        ("on_before_optimizer_step", 1),
        ("on_after_optimizer_step", 1),
        ("on_train_step_end", 2),
        ("on_validate_start", 2),
        ("on_validate_end", 2),
        ("on_before_save_checkpoint", 2),
        ("on_save_checkpoint", 2),
        ("on_after_save_checkpoint", 2),
        ("on_train_step_start", 2),
        ("on_before_optimizer_step", 2),
        ("on_after_optimizer_step", 2),
        ("on_train_step_start", 3),
        ("on_before_optimizer_step", 3),
        ("on_after_optimizer_step", 3),
        ("on_train_step_end", 4),
        ("on_validate_start", 4),
        ("on_validate_end", 4),
        ("on_before_save_checkpoint", 4),
        ("on_save_checkpoint", 4),
        ("on_after_save_checkpoint", 4),
        ("on_fit_end", 4),
    ]
    assert recorder.calls == expected


class Labelled:
    """Appends ``(label, hook)`` to a shared list for every protocol call."""

    def __init__(self, label, calls):
        self.label, self.calls = label, calls

    def __getattr__(self, name):
        if name not in CALLBACK_HOOKS:
            raise AttributeError(name)

        def record(trainer, *args):
            self.calls.append((name, self.label))

        return record


def test_closing_hooks_run_in_reverse_order(tmp_path):
    calls = []
    trainer = _trainer(tmp_path, callbacks=[Labelled("a", calls), Labelled("b", calls)])
    trainer.fit(_data(), _data("val"))
    order = {}
    for name, label in calls:
        order.setdefault(name, [])
        if label not in order[name]:
            order[name].append(label)
    for name in CALLBACK_HOOKS:
        if name in ("on_before_load_checkpoint", "on_load_checkpoint"):
            continue  # a fit from scratch loads nothing
        closing = name.endswith("_end") or name.startswith("on_after_")
        assert order[name] == (["b", "a"] if closing else ["a", "b"]), name


def test_hook_order_of_a_resume_and_a_validate(tmp_path):
    _trainer(tmp_path).fit(_data())
    recorder = Recorder()
    trainer = _trainer(tmp_path, callbacks=[recorder], loop={"max_steps": 4})
    trainer.validate(_data("val"))
    assert recorder.calls == [
        ("on_model_built", 0),
        ("on_before_load_checkpoint", 0),
        ("on_load_checkpoint", 4),
        ("on_validate_start", 4),
        ("on_validate_end", 4),
    ]


def test_callback_state_is_saved_and_restored_across_a_real_resume(tmp_path):
    first = Counter()
    _trainer(tmp_path, callbacks=[first]).fit(_data())
    assert first.records == 2
    saved = load_checkpoint(tmp_path / "run" / "checkpoint_4.mdl")
    # one entry per callback (the given one, then the default Throughput, which keeps its FLOP
    # count for a resume and here says it reports nothing: no tokens), then per logger (the two
    # default loggers have no state)
    throughput = {"flops_per_step": None, "step_tokens": 0, "step_samples": 0, "active": False}
    assert saved["callbacks"] == [
        {"name": "Counter", "state": {"records": 2}},
        {"name": "Throughput", "state": throughput},
        None,
        None,
    ]
    second = Counter()
    trainer = _trainer(tmp_path, callbacks=[second], loop={"max_steps": 8})
    trainer.fit(_data())
    assert second.loaded == {"records": 2}
    assert second.records == 4
    train = [r for r in _rows(tmp_path / "run") if r["split"] == "train"]
    assert [(r["step"], r["records_seen"]) for r in train] == [(2, 1), (4, 2), (6, 3), (8, 4)]


def test_a_callback_state_saved_under_another_class_starts_fresh(tmp_path, caplog):
    _trainer(tmp_path, callbacks=[Counter()]).fit(_data())

    class Other(Counter):
        pass

    other = Other()
    _trainer(tmp_path, callbacks=[other], loop={"max_steps": 6}).fit(_data())
    assert other.loaded is None
    assert "no saved state for callback 0 (Other)" in caplog.text


class Skip:
    """Keeps the listed checkpoint parts from being restored."""

    def __init__(self, *parts):
        self.parts = parts
        self.seen = None

    def on_before_load_checkpoint(self, trainer, state):
        self.seen = sorted(state)
        for part in self.parts:
            del state[part]


def test_on_before_load_checkpoint_sees_the_parts_and_may_skip_them(tmp_path):
    _trainer(tmp_path).fit(_data())
    saved = load_checkpoint(tmp_path / "run" / "checkpoint_4.mdl")
    skip = Skip("optimizer", "global_step", "dataloader")
    trainer = _trainer(tmp_path, callbacks=[skip], loop={"max_steps": 4})
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.load_checkpoint(tmp_path / "run" / "checkpoint_4.mdl")
    present = {part for part, key in PARTS.items() if key in saved}  # grad_scaler: with fp16
    assert {"model", "optimizer", "schedulers", "global_step", "dataloader", "callbacks"} <= present
    assert skip.seen == sorted(present)
    assert trainer.global_step == 0
    restored = trainer.optimizer.state_dict()["state"]  # momentum buffers: not restored
    assert float(saved["optimizer"]["state"][0]["momentum_buffer"].abs().sum()) > 0
    assert all(not s or float(s["momentum_buffer"].abs().sum()) == 0.0 for s in restored.values())
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, saved["model"][name])
        assert not torch.equal(value, before[name])


def test_skipping_the_model_keeps_the_built_weights(tmp_path):
    _trainer(tmp_path).fit(_data())
    trainer = _trainer(tmp_path, callbacks=[Skip("model")], loop={"max_steps": 4})
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.load_checkpoint(tmp_path / "run" / "checkpoint_4.mdl")
    assert trainer.global_step == 4
    for name, value in trainer.model.state_dict().items():
        assert torch.equal(value, before[name])


def test_on_save_checkpoint_gets_the_written_file(tmp_path):
    seen = []

    class Saved:
        def on_save_checkpoint(self, trainer, path):
            seen.append((path.name, path.is_file(), trainer.global_step))

    _trainer(tmp_path, callbacks=[Saved()]).fit(_data())
    assert seen == [("checkpoint_2.mdl", True, 2), ("checkpoint_4.mdl", True, 4)]


def test_default_loggers_and_an_added_one(tmp_path):
    added = ListLogger()
    trainer = _trainer(tmp_path, loggers=[added], callbacks=[Counter()])
    assert [type(x).__name__ for x in trainer.loggers] == [
        "ProgressLogger",
        "MetricsFilesLogger",
        "ListLogger",
    ]
    trainer.fit(_data(), _data("val"))
    assert [(step, split) for step, split, _ in added.records] == [
        (2, "train"),
        (2, "val"),
        (4, "train"),
        (4, "val"),
    ]
    assert added.records[0][2]["records_seen"] == 1.0  # what a callback added is logged too
    assert added.closed == 1
    rows = _rows(tmp_path / "run")
    assert [(r["step"], r["split"]) for r in rows] == [
        (2, "train"),
        (2, "val"),
        (4, "train"),
        (4, "val"),
    ]
    assert rows[2]["loss"] == added.records[2][2]["loss"]


def test_a_default_logger_is_removed_with_none_and_replaced_by_its_class(tmp_path):
    trainer = _trainer(tmp_path, loggers=[{"MetricsFilesLogger": None}])
    assert [type(x).__name__ for x in trainer.loggers] == ["ProgressLogger"]
    trainer.fit(_data())
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    mine = ProgressLogger()
    again = _trainer(tmp_path, loggers=[mine, {"progresslogger": None}])
    assert again.loggers[-1] is mine
    assert [type(x).__name__ for x in again.loggers] == ["MetricsFilesLogger", "ProgressLogger"]


def test_removing_what_is_not_a_default_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"loggers\[0\].*'TensorBoardLoger' is none"):
        _trainer(tmp_path, loggers=[{"TensorBoardLoger": None}])


def test_a_logger_without_log_metrics_is_refused(tmp_path):
    class NotALogger:
        def close(self):
            pass

    with pytest.raises(ConfigError, match="NotALogger lacks log_metrics"):
        _trainer(tmp_path, loggers=[NotALogger()])


def test_loggers_are_closed_when_fit_fails(tmp_path):
    added = ListLogger()

    class Boom:
        def on_train_step_end(self, trainer, metrics):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _trainer(tmp_path, loggers=[added], callbacks=[Boom()]).fit(_data())
    assert added.closed == 1


def test_metrics_files_logger_truncates_replayed_rows_on_resume(tmp_path):
    _trainer(tmp_path, loop={"max_steps": 6}).fit(_data())
    (tmp_path / "run" / "checkpoint_6.mdl").unlink()  # as if killed after step 6 was logged
    _trainer(tmp_path, loop={"max_steps": 6}).fit(_data())
    train = [r["step"] for r in _rows(tmp_path / "run") if r["split"] == "train"]
    assert train == [2, 4, 6]


def test_mapping_entries_are_built_through_the_registry(tmp_path):
    trainer = _trainer(tmp_path, loggers=[{"MetricsFilesLogger": {}}])
    assert [type(x) for x in trainer.loggers] == [ProgressLogger, MetricsFilesLogger]
    with pytest.raises(ConfigError, match="Unknown logger 'MetricFilesLoger'"):
        _trainer(tmp_path, loggers=[{"MetricFilesLoger": {}}])


# -- run files -------------------------------------------------------------------------------

RUN = """\
trainer:
  init:
    device: CPU
    model: {MLP: {in_features: 8, out_features: 3}}
    optimizer: {SGD: {lr: 0.1}}
    loop: {max_steps: 4}
    loggers:
      - MetricsFilesLogger: null
      - ProgressLogger: {}
    callbacks: []
  fit:
    train_dataloader: {Synthetic: {batch_size: 8, in_features: 8, num_classes: 3}}
"""


def _check(text, registry):
    return check_run(load_yaml(textwrap.dedent(text).encode(), "run.yaml"), registry, "run.yaml")


def _issues(text, registry):
    with pytest.raises(ConfigError) as info:
        _check(text, registry)
    return {issue.path: issue for issue in info.value.issues}


def test_run_file_loggers_and_callbacks_go_into_the_plan(installed_registry):
    (plan,) = _check(RUN, installed_registry)
    removed, listed = plan.loggers
    assert removed == RemovedDefault("logger", "MetricsFilesLogger", "trainer.init.loggers[0]")
    assert removed.location == "run.yaml:8:9"
    assert isinstance(listed, ComponentSpec)
    assert (listed.kind, listed.name, dict(listed.arguments)) == ("logger", "ProgressLogger", {})
    assert plan.callbacks == ()


def test_null_on_a_logger_that_is_not_a_default_says_so(installed_registry):
    text = RUN.replace("ProgressLogger: {}", "MLP2Logger: null").replace(
        "MetricsFilesLogger: null", "ProgressLoger: null"
    )
    issues = _issues(text, installed_registry)
    assert set(issues) == {
        "trainer.init.loggers[0].ProgressLoger",
        "trainer.init.loggers[1].MLP2Logger",
    }
    typo = issues["trainer.init.loggers[0].ProgressLoger"]
    assert typo.location == "run.yaml:8:9"
    assert "Did you mean 'ProgressLogger'?" in typo.message
    assert "defaults: ProgressLogger, MetricsFilesLogger" in typo.message


def test_null_on_a_registered_non_default_logger_is_an_error(installed_registry):
    if "TensorBoardLogger" not in installed_registry.names("logger"):
        pytest.skip("plugtrain-callbacks is not installed")
    issues = _issues(
        RUN.replace("ProgressLogger: {}", "TensorBoardLogger: null"), installed_registry
    )
    (issue,) = issues.values()
    assert "TensorBoardLogger is not a default logger" in issue.message
    assert "write TensorBoardLogger: {} to use it" in issue.message


def test_unknown_callbacks_and_bad_shapes_have_positions(installed_registry):
    text = RUN.replace(
        "callbacks: []", "callbacks: [{NoSuchCallback: {}}, ComputeNorm, {A: {}, B: {}}]"
    )
    issues = _issues(text, installed_registry)
    unknown = issues["trainer.init.callbacks[0].NoSuchCallback"]
    assert unknown.location == "run.yaml:10:18"
    assert "Unknown callback 'NoSuchCallback'" in unknown.message
    assert issues["trainer.init.callbacks[1]"].message == (
        "write the callback as {ComputeNorm: {...arguments}}"
    )
    assert "one-key mapping" in issues["trainer.init.callbacks[2]"].message


def test_loggers_must_be_a_list(installed_registry):
    issues = _issues(RUN.replace("callbacks: []", "callbacks: {CheckLoss: {}}"), installed_registry)
    assert "must be a list of callbacks" in issues["trainer.init.callbacks"].message


def test_check_of_callbacks_and_loggers_imports_no_torch(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "run.yaml"
    path.write_text(RUN)
    code = (
        "import sys\n"
        "from plugtrain.config import load_plan\n"
        "load_plan(sys.argv[1])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_run_file_without_the_metrics_logger_writes_no_metrics(tmp_path, installed_registry):
    from plugtrain.config import plan_run
    from plugtrain.train.assembly.run import run_plan

    text = RUN.replace("device: CPU", f"device: CPU\n    model_dir: {tmp_path / 'run'}")
    plan = plan_run(load_yaml(text.encode(), "run.yaml"), installed_registry, "run.yaml")
    run_plan(plan, installed_registry)
    assert (tmp_path / "run" / "checkpoint_4.mdl").is_file()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


class Other(Counter):
    """A second stateful callback class."""


def test_callback_state_is_matched_by_class_name_and_occurrence(tmp_path):
    first, second, other = Counter(), Counter(), Other()
    first.records, second.records, other.records = 10, 20, 30
    trainer = _trainer(tmp_path, callbacks=[Recorder(), first, other, second])
    trainer.fit(_data())
    saved = trainer.checkpoint_path(4)
    # the recorder and the Other removed, the order changed: every state still finds its owner
    a, b = Counter(), Counter()
    kept = Other()
    resumed = _trainer(tmp_path, callbacks=[kept, a, b], loop={"max_steps": 4})
    resumed.load_checkpoint(saved)
    assert (a.loaded, b.loaded, kept.loaded) == (
        {"records": first.records},
        {"records": second.records},
        {"records": other.records},
    )


def test_callback_state_saved_without_a_name_is_matched_by_position():
    from plugtrain.train.loop.callbacks import Callbacks

    a, b = Counter(), Other()
    Callbacks([a, b]).load_state_dict([None, {"state": {"records": 5}}])
    assert (a.loaded, b.loaded) == (None, {"records": 5})
