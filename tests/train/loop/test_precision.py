"""``trainer.init.precision`` for real: autocast, loss scaling, clipping, resume, run files.

Every Model Zoo precision key appears here: ``enabled``, ``fp16_type``, ``precision_opt_level``,
``loss_scaling_factor``, ``initial_loss_scale``, ``steps_per_increase``, ``min_loss_scale``,
``max_loss_scale``, ``max_gradient_norm``, ``max_gradient_value``, ``log_loss_scale``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from support.plans import trainer_plans
from support.plugtrain_cli import run_plugtrain

import plugtrain
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.config.precision import PrecisionSettings
from plugtrain.errors import TrainingError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint
from plugtrain.train.data import seed_everything
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")

SEED = 7


def _model():
    return MLP(in_features=16, hidden=32, out_features=4)


def _data(batch_size=8, num_examples=64):
    return synthetic_loader(
        batch_size=batch_size,
        num_examples=num_examples,
        in_features=16,
        num_classes=4,
        shuffle=False,
    )


def _trainer(tmp_path, precision, **changes):
    sgd = plugtrain.resolve("optimizer", "SGD")
    arguments = {
        "device": "CPU",
        "model_dir": tmp_path,
        "model": _model,
        "optimizer": lambda model: sgd(model.parameters(), lr=0.1, momentum=0.9),
        "loop": {"max_steps": 8},
        "logging": {"log_steps": 1},
        "seed": SEED,
        "precision": precision,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def _metrics(model_dir: Path, split: str = "train") -> list[dict]:
    lines = (Path(model_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


class StepRecorder:
    """A callback keeping what each step looked like when its metrics were written."""

    def __init__(self):
        self.weights: list[list[torch.Tensor]] = []
        self.norms: list[float | None] = []

    def on_before_optimizer_step(self, trainer, optimizer):
        self.norms.append(trainer.precision.last_grad_norm)

    def on_train_step_end(self, trainer, metrics):
        self.weights.append([p.detach().clone() for p in trainer.model.parameters()])


class OverflowingLoss:
    """Cross-entropy times 1e6 at the chosen (1-based) training steps.

    The loss stays finite in float32, but its gradient overflows float16 in the backward pass
    of the autocast model: a real inf gradient, which the loss scaler must catch.
    """

    def __init__(self, steps):
        self.steps, self.calls = set(steps), 0

    def __call__(self, outputs, targets):
        self.calls += 1
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        return loss * 1e6 if self.calls in self.steps else loss


# -- the settings -----------------------------------------------------------------------------

EVERY_KEY = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 16, hidden: 32, out_features: 4}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 4}}
    precision:
{precision}
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 16, num_classes: 4}}
"""


def _run_file(tmp_path, precision: str, name="run.yaml") -> Path:
    body = "\n".join("      " + line for line in precision.strip().splitlines())
    path = tmp_path / name
    path.write_text(EVERY_KEY.format(model_dir=tmp_path / "model", precision=body))
    return path


def test_every_model_zoo_key_reaches_the_trainer_plan(tmp_path):
    run = _run_file(
        tmp_path,
        """
enabled: true
fp16_type: float16
precision_opt_level: 1
loss_scaling_factor: dynamic
initial_loss_scale: 1024.0
steps_per_increase: 30
min_loss_scale: 1.0
max_loss_scale: 65536.0
max_gradient_norm: 1.0
log_loss_scale: true
""",
    )
    (plan,) = trainer_plans(run)
    assert plan.precision == PrecisionSettings(
        enabled=True,
        fp16_type="float16",
        precision_opt_level=1,
        loss_scaling_factor="dynamic",
        initial_loss_scale=1024.0,
        steps_per_increase=30,
        min_loss_scale=1.0,
        max_loss_scale=65536.0,
        max_gradient_norm=1.0,
        log_loss_scale=True,
    )


def test_model_zoo_defaults():
    settings = PrecisionSettings()
    assert settings.enabled is True
    assert settings.fp16_type == "bfloat16"
    assert settings.loss_scaling_factor == 1.0
    assert settings.steps_per_increase == 2000
    assert settings.precision_opt_level is None
    assert settings.max_gradient_norm is None
    assert settings.max_gradient_value is None
    assert settings.log_loss_scale is None


def _check(run: Path) -> list[str]:
    done = run_plugtrain("check", str(run), timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    return [line.strip() for line in done.stderr.splitlines()]


def _error_at(lines: list[str], run: Path, line: int) -> str:
    found = [text for text in lines if text.startswith(f"{run}:{line}:")]
    assert found, f"no error at line {line}: {lines}"
    return found[0]


def test_bad_precision_values_and_keys_are_reported_at_their_positions_by_check(tmp_path):
    run = _run_file(
        tmp_path,
        """
fp16_type: float8
precision_opt_level: 7
loss_scaling_factor: sometimes
steps_per_increase: 0
max_grad_norm: 1.0
""",
    )
    lines = _check(run)
    where = "trainer.init.precision"
    expected = {
        9: f"9:18: {where}.fp16_type: must be of type Literal['float16', 'bfloat16', 'cbfloat16']",
        10: f"10:28: {where}.precision_opt_level: must be one of None, 0, 1, 2, got 7",
        11: f"11:28: {where}.loss_scaling_factor: must be of type float | Literal['dynamic']",
        12: f"12:27: {where}.steps_per_increase: must be > 0, got 0",
        13: f"13:7: {where}.max_grad_norm: unknown argument 'max_grad_norm'",
    }
    for line, message in expected.items():
        assert f"{run}:{message}" in _error_at(lines, run, line)


def test_model_zoo_precision_rules_are_reported_at_the_keys_by_check(tmp_path):
    run = _run_file(
        tmp_path,
        """
min_loss_scale: 8.0
max_loss_scale: 2.0
max_gradient_norm: 1.0
max_gradient_value: 0.5
""",
    )
    lines = _check(run)
    where = "trainer.init.precision"
    assert (
        f"{where}.max_gradient_value: gradients are clipped by norm (max_gradient_norm) or by "
        "value (max_gradient_value), not both" in _error_at(lines, run, 12)
    )
    assert (
        f"{where}.min_loss_scale: min_loss_scale (8) must not exceed max_loss_scale (2)"
        in _error_at(lines, run, 9)
    )


def test_dynamic_scaling_refuses_a_minimum_below_cstorchs(tmp_path):
    with pytest.raises(plugtrain.ConfigError, match=r"min_loss_scale must be >= 2\*\*-14"):
        _trainer(tmp_path, {"loss_scaling_factor": "dynamic", "min_loss_scale": 1e-6})


# -- autocast ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fp16_type", ["bfloat16", "float16", "cbfloat16"])
def test_autocast_runs_the_forward_pass_in_the_half_type(tmp_path, fp16_type, caplog):
    seen: list[torch.dtype] = []
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        trainer = _trainer(
            tmp_path,
            {"fp16_type": fp16_type, "precision_opt_level": 2},
            loop={"max_steps": 2},
        )
        trainer.model.register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))
        trainer.fit(_data(), _data())
    half = torch.float16 if fp16_type == "float16" else torch.bfloat16
    assert seen == [half] * (2 + 8)  # two training steps, then eight evaluation batches
    notes = caplog.text
    assert notes.count("precision_opt_level 2 is handed to the CSX compiler") == 1
    if fp16_type == "cbfloat16":
        assert notes.count("cbfloat16 exists only on CSX; bfloat16 is used here") == 1
    assert (trainer.precision.scaler is not None) == (fp16_type == "float16")


def test_disabled_precision_keeps_full_precision_but_still_clips(tmp_path):
    seen: list[torch.dtype] = []
    trainer = _trainer(tmp_path, {"enabled": False, "max_gradient_norm": 0.01})
    trainer.model.register_forward_hook(lambda _m, _i, output: seen.append(output.dtype))
    trainer.fit(_data())
    assert set(seen) == {torch.float32}
    assert all(r["grad_norm"] > 0.01 for r in _metrics(tmp_path))


def test_bfloat16_needs_no_scaler_and_says_the_scaling_keys_are_inert(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        trainer = _trainer(
            tmp_path,
            {"fp16_type": "bfloat16", "loss_scaling_factor": "dynamic", "log_loss_scale": True},
        )
        trainer.fit(_data())
    assert trainer.precision.scaler is None
    assert "bfloat16 needs no loss scaling" in caplog.text
    assert "log_loss_scale has no effect" in caplog.text
    assert all("loss_scale" not in r for r in _metrics(tmp_path))
    assert load_checkpoint(tmp_path / "checkpoint_8.mdl")["grad_scaler"] is None


# -- dynamic loss scaling ---------------------------------------------------------------------

DYNAMIC = {
    "fp16_type": "float16",
    "loss_scaling_factor": "dynamic",
    "initial_loss_scale": 8.0,
    "steps_per_increase": 2,
    "min_loss_scale": 4.0,
    "max_loss_scale": 32.0,
}


def test_the_scale_grows_backs_off_on_overflow_and_stays_within_its_bounds(tmp_path):
    recorder = StepRecorder()
    loss = OverflowingLoss({3, 10, 11, 12})
    trainer = _trainer(
        tmp_path, DYNAMIC, loss_fn=loss, callbacks=[recorder], loop={"max_steps": 14}
    )
    trainer.fit(_data(num_examples=128))
    records = _metrics(tmp_path)
    scales = [r["loss_scale"] for r in records]
    #          1    2    3 (inf) 4    5     6     7     8     9 (64 capped) 10..12 (inf)   13   14
    assert scales == [8, 16, 8, 8, 16, 16, 32, 32, 32, 16, 8, 4, 4, 8]
    overflowed = [r["step"] for r in records if r.get("overflow_steps")]
    assert overflowed == [3, 10, 11, 12]
    for step in overflowed:  # a skipped update leaves the weights bit-identical
        before, after = recorder.weights[step - 2], recorder.weights[step - 1]
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert not all(
        torch.equal(a, b) for a, b in zip(recorder.weights[2], recorder.weights[3], strict=True)
    )
    assert trainer.global_step == 14


def test_an_overflow_at_the_minimum_scale_goes_to_nan_policy(tmp_path, caplog):
    settings = {**DYNAMIC, "initial_loss_scale": 4.0}
    with pytest.raises(TrainingError, match="not finite at the minimum loss scale 4 at step 2"):
        _trainer(tmp_path / "stop", settings, loss_fn=OverflowingLoss({2})).fit(_data())
    trainer = _trainer(
        tmp_path / "skip",
        settings,
        loss_fn=OverflowingLoss({2, 3}),
        loop={"max_steps": 6, "nan_policy": "skip_step"},
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        trainer.fit(_data())
    assert caplog.text.count("at the minimum loss scale 4; its update was skipped") == 2
    assert [r["loss_scale"] for r in _metrics(tmp_path / "skip")] == [4, 4, 4, 4, 8, 8]


def test_a_fixed_loss_scale_never_changes_and_an_overflow_goes_to_nan_policy(tmp_path, caplog):
    settings = {"fp16_type": "float16", "loss_scaling_factor": 128.0, "log_loss_scale": True}
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        trainer = _trainer(
            tmp_path,
            {**settings, "initial_loss_scale": 4.0},
            loss_fn=OverflowingLoss({3}),
            loop={"max_steps": 6, "nan_policy": "skip_step"},
        )
        trainer.fit(_data())
    assert [r["loss_scale"] for r in _metrics(tmp_path)] == [128.0] * 6
    assert "initial_loss_scale only apply to loss_scaling_factor: dynamic" in caplog.text
    assert "the gradients are not finite with the fixed loss scale 128" in caplog.text
    with pytest.raises(TrainingError, match="fixed loss scale 128 at step 3; training stopped"):
        _trainer(tmp_path / "stop", settings, loss_fn=OverflowingLoss({3})).fit(_data())


def test_a_non_finite_gradient_norm_without_a_scaler_goes_to_nan_policy(tmp_path, caplog):
    trainer = _trainer(
        tmp_path,
        {"enabled": False, "max_gradient_norm": 1.0},
        loop={"max_steps": 4, "nan_policy": "skip_step"},
    )
    first = next(trainer.model.parameters())
    calls = [0]

    def poison(grad):
        calls[0] += 1
        return grad * float("inf") if calls[0] == 2 else grad

    first.register_hook(poison)
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        trainer.fit(_data())
    assert "step 2: the gradient norm is inf; its update was skipped" in caplog.text
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_the_loss_scale_resumes_exactly_from_a_checkpoint(tmp_path):
    settings = {**DYNAMIC, "steps_per_increase": 4, "max_loss_scale": 1024.0}
    settings["max_gradient_norm"] = 0.5
    straight = _trainer(tmp_path / "straight", settings, loop={"max_steps": 12})
    straight.fit(_data(num_examples=128))

    first = _trainer(tmp_path / "resumed", settings, loop={"max_steps": 6})
    first.fit(_data(num_examples=128))
    saved = load_checkpoint(tmp_path / "resumed" / "checkpoint_6.mdl")["grad_scaler"]
    assert saved["scale"] == 16.0  # grew once, after step 4
    assert saved["_growth_tracker"] == 2
    second = _trainer(tmp_path / "resumed", settings, loop={"max_steps": 12})
    second.fit(_data(num_examples=128))

    ends = [
        load_checkpoint(tmp_path / name / "checkpoint_12.mdl") for name in ("straight", "resumed")
    ]
    assert ends[0]["grad_scaler"] == ends[1]["grad_scaler"]
    assert ends[0]["grad_scaler"]["scale"] == 64.0
    for name, weight in ends[0]["model"].items():
        assert torch.equal(weight, ends[1]["model"][name]), name
    tail = [r["loss_scale"] for r in _metrics(tmp_path / "straight")][6:]
    assert [r["loss_scale"] for r in _metrics(tmp_path / "resumed")][6:] == tail


# -- clipping against a hand-written loop -----------------------------------------------------


def _hand_loop(steps, clip, accum=1):
    """SGD on the same model and batches, clipping with torch's own functions."""
    seed_everything(SEED)
    model = _model()
    optimizer = plugtrain.resolve("optimizer", "SGD")(model.parameters(), lr=0.1, momentum=0.9)
    batches = iter(_data())
    weights, norms = [], []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        for _ in range(accum):
            inputs, labels = next(batches)
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            (loss if accum == 1 else loss / accum).backward()
        norms.append(clip(list(model.parameters())))
        optimizer.step()
        weights.append([p.detach().clone() for p in model.parameters()])
    return weights, norms


@pytest.mark.parametrize("accum", [1, 2])
def test_clipping_by_norm_equals_clip_grad_norm(tmp_path, accum):
    recorder = StepRecorder()
    trainer = _trainer(
        tmp_path,
        {"enabled": False, "max_gradient_norm": 0.3},
        callbacks=[recorder],
        loop={"max_steps": 4, "grad_accum_steps": accum},
    )
    trainer.fit(_data())
    weights, norms = _hand_loop(
        4, lambda params: float(torch.nn.utils.clip_grad_norm_(params, 0.3)), accum
    )
    assert min(norms) > 0.3  # clipping is active at every step
    assert recorder.norms == norms
    assert [r["grad_norm"] for r in _metrics(tmp_path)] == norms
    for mine, theirs in zip(recorder.weights, weights, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))


def test_clipping_by_value_equals_clip_grad_value(tmp_path):
    recorder = StepRecorder()
    trainer = _trainer(
        tmp_path, {"enabled": False, "max_gradient_value": 0.01}, callbacks=[recorder]
    )
    trainer.fit(_data())
    weights, _ = _hand_loop(8, lambda params: torch.nn.utils.clip_grad_value_(params, 0.01))
    for mine, theirs in zip(recorder.weights, weights, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert all("grad_norm" not in r for r in _metrics(tmp_path))


# -- through the command line -----------------------------------------------------------------

BF16_RUN = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    seed: 5
    model:
      MLP: {{in_features: 64, hidden: 32, out_features: 10}}
    optimizer:
      AdamW: {{lr: 0.003}}
    loop: {{max_steps: 60, eval_frequency: 0}}
    logging: {{log_steps: 10}}
    precision:
      enabled: true
      fp16_type: cbfloat16
      loss_scaling_factor: dynamic
      max_gradient_norm: 1.0
  fit:
    train_dataloader: {{Digits: {{batch_size: 32}}}}
    val_dataloader: {{Digits: {{batch_size: 256, split: val}}}}
"""


@pytest.mark.slow
def test_bf16_with_clipping_trains_from_a_run_file_through_plugtrain_fit(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text(BF16_RUN.format(model_dir=tmp_path / "model"))
    done = run_plugtrain("fit", str(run), timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("cbfloat16 exists only on CSX; bfloat16 is used here") == 1
    assert done.stderr.count("bfloat16 needs no loss scaling") == 1
    records = _metrics(tmp_path / "model")
    assert [r["step"] for r in records] == [10, 20, 30, 40, 50, 60]
    assert all(r["grad_norm"] > 0 for r in records)
    assert all("loss_scale" not in r for r in records)
    assert records[-1]["loss"] < records[0]["loss"]
    (val,) = _metrics(tmp_path / "model", "val")
    assert val["accuracy"] > 0.5  # ten classes: well above chance


def test_a_resumed_scaler_keeps_this_runs_settings(tmp_path):
    from plugtrain.train.loop.precision import Precision

    saved = {"scale": 4096.0, "growth_factor": 2.0, "backoff_factor": 0.5}
    saved.update({"growth_interval": 7, "_growth_tracker": 3})
    now = PrecisionSettings(**{**DYNAMIC, "steps_per_increase": 50, "max_loss_scale": 1024.0})
    precision = Precision(now, torch.device("cpu"))
    precision.load_state_dict(saved)
    state = precision.state_dict()
    assert state["scale"] == 1024.0  # today's max_loss_scale
    assert state["_growth_tracker"] == 3
    assert state["growth_interval"] == 50  # today's steps_per_increase
    fixed_scale = PrecisionSettings(fp16_type="float16", loss_scaling_factor=64.0)
    fixed = Precision(fixed_scale, torch.device("cpu"))
    fixed.load_state_dict(saved)
    assert fixed.state_dict()["scale"] == 64.0


def test_log_loss_scale_false_keeps_the_scale_out_of_the_metrics(tmp_path):
    trainer = _trainer(tmp_path, {**DYNAMIC, "log_loss_scale": False}, loop={"max_steps": 2})
    trainer.fit(_data())
    assert trainer.precision.scaler is not None
    records = _metrics(tmp_path)
    assert len(records) == 2
    assert all("loss_scale" not in r for r in records)
