"""Resume edge cases with clear outcomes (R06-R09): real Trainers and checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from support.reliability import small_data, small_trainer

from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.errors import TrainingError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint
from plugtrain.train.trainer import Trainer


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: Any) -> Path:
    """A folder with checkpoints 5 and 10 of a run with a scheduler."""
    model_dir = tmp_path_factory.mktemp("fitted")
    small_trainer(
        model_dir,
        max_steps=10,
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    ).fit(small_data())
    return model_dir


def test_r06_a_larger_batch_size_on_resume_is_an_error_naming_both_sizes(tmp_path, fitted):
    trainer = small_trainer(
        tmp_path / "m",
        max_steps=20,
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    )
    larger = synthetic_loader(batch_size=64, num_examples=128, in_features=16, num_classes=4)
    with pytest.raises(TrainingError) as refused:
        trainer.fit(larger, ckpt_path=fitted / "checkpoint_10.mdl")
    assert str(refused.value) == (
        "the global batch differs from the checkpoint's: it was written with 16 samples per "
        "optimizer step, this run takes 64 (64 per process x 1 processes x 1 micro-batches)"
    )
    assert not list((tmp_path / "m").glob("checkpoint_*"))  # no step was taken


def test_r07_an_evaluation_only_trainer_loads_just_the_model(fitted):
    evaluator = Trainer(
        device="CPU",
        model_dir=fitted,
        model=lambda: MLP(in_features=16, out_features=4, hidden=32, dropout=0.1),
        logging={"log_steps": 1},
        loggers=[{"MetricsFilesLogger": None}],
    )
    metrics = evaluator.validate(small_data(), ckpt_path=fitted / "checkpoint_10.mdl")
    # was: "schedulers: 1 scheduler states in the checkpoint, 0 schedulers in this run"
    assert set(metrics) >= {"loss", "accuracy"}
    saved = load_checkpoint(fitted / "checkpoint_10.mdl")["model"]
    for name, value in evaluator.unwrapped_model.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_r08_max_steps_already_reached_says_so(tmp_path, fitted, caplog):
    trainer = small_trainer(
        tmp_path,
        max_steps=5,
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        assert trainer.fit(small_data(), ckpt_path=fitted / "checkpoint_10.mdl") == {}
    assert (
        "nothing to train: the fit resumed at step 10 and ends at step 5 (loop.max_steps is "
        "already reached); raise loop.max_steps, or use num_steps, to train further"
    ) in caplog.text  # was: exit 0 without a word
    assert not list(tmp_path.glob("checkpoint_*"))


@pytest.mark.parametrize(
    ("written", "warning"),
    [
        (None, "no plugtrain version recorded (written by hand or by another program)"),
        ("0.1.0rc1", "written by plugtrain 0.1.0rc1, this is plugtrain 0.1.0 (a pre-release"),
        ("banana", "written by plugtrain 'banana', not a version; loading it anyway"),
    ],
)
def test_r09_pre_release_and_missing_versions_are_said(tmp_path, fitted, caplog, written, warning):
    state = load_checkpoint(fitted / "checkpoint_5.mdl")
    state["metadata"] = {**state["metadata"], "plugtrain": written}
    path = tmp_path / "checkpoint_5.mdl"
    save_checkpoint(path, state)
    trainer = small_trainer(
        tmp_path / "m",
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        trainer.load_checkpoint(path)  # was: loaded without a word
    assert warning in caplog.text
    assert trainer.global_step == 5


def _steps(path: Path) -> list[int]:
    import json

    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_r10_fine_tuning_into_the_same_folder_keeps_the_earlier_rows(tmp_path, fitted):
    model_dir = tmp_path / "run"
    small_trainer(model_dir, max_steps=6, checkpoint_steps=3).fit(small_data())
    assert _steps(model_dir / "metrics.jsonl") == [1, 2, 3, 4, 5, 6]
    tuned = small_trainer(
        model_dir,
        max_steps=14,
        checkpoint_steps=7,
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    )
    tuned.fit(small_data(), ckpt_path=fitted / "checkpoint_10.mdl")  # another folder's
    (kept,) = model_dir.glob("metrics.before-*.jsonl")
    assert _steps(kept) == [1, 2, 3, 4, 5, 6]  # was: removed ("rows after step 10" kept only)
    assert len(list(model_dir.glob("metrics.before-*.csv"))) == 1
    assert _steps(model_dir / "metrics.jsonl") == [11, 12, 13, 14]
    # resuming this folder's own checkpoint still cuts the replayed rows back (R01)
    again = small_trainer(
        model_dir,
        max_steps=16,
        checkpoint_steps=7,
        schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3)],
    )
    again.fit(small_data())
    assert again.loaded_step == 14
    assert _steps(model_dir / "metrics.jsonl") == [11, 12, 13, 14, 15, 16]
    assert len(list(model_dir.glob("metrics.before-*.jsonl"))) == 1


@pytest.mark.slow
def test_r11_mlflow_with_its_default_store_resumes_and_a_copy_logs_into_its_own(
    tmp_path, monkeypatch
):
    pytest.importorskip("mlflow")
    import shutil

    import plugtrain

    mlflow_logger = plugtrain.resolve("logger", "MLflowLogger")

    def fit(model_dir: Path, steps: int) -> Any:
        monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # as in a new process
        logger = mlflow_logger()
        small_trainer(model_dir, max_steps=steps, loggers=[logger]).fit(small_data())
        return logger

    def history(model_dir: Path, run_id: str) -> list[int]:
        from mlflow.tracking import MlflowClient

        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient((model_dir.resolve() / "mlruns").as_uri())
        return sorted(m.step for m in client.get_metric_history(run_id, "train/loss"))

    original = tmp_path / "a"
    first = fit(original, 5)
    second = fit(original, 10)  # was: "the file store is in maintenance mode"
    assert second.run_id == first.run_id
    assert history(original, first.run_id) == list(range(1, 11))
    copy = tmp_path / "b"
    shutil.copytree(original, copy)
    third = fit(copy, 15)
    assert third.tracking_uri == (copy.resolve() / "mlruns").as_uri()
    assert history(original, first.run_id) == list(range(1, 11))  # was: the copy logged here
    assert history(copy, third.run_id) == list(range(1, 16))


class _LazyAdamW(torch.optim.AdamW):
    """A third-party optimizer creating its state at its first step (not checked on loading)."""


def test_r12_a_renamed_optimizer_state_key_blames_the_checkpoint(tmp_path):
    from plugtrain.errors import CheckpointMismatchError

    adamw = _LazyAdamW  # the plugin optimizers and torch's own are refused on loading (R14)
    model_dir = tmp_path / "run"

    def trainer(steps: int) -> Any:
        return small_trainer(
            model_dir,
            max_steps=steps,
            optimizer=lambda model: adamw(model.parameters(), lr=0.01),
        )

    trainer(5).fit(small_data())
    path = model_dir / "checkpoint_5.mdl"
    state = load_checkpoint(path)
    for per_parameter in state["optimizer"]["state"].values():
        per_parameter["exp_avg_renamed"] = per_parameter.pop("exp_avg")
    save_checkpoint(path, state)
    with pytest.raises(CheckpointMismatchError) as refused:
        trainer(10).fit(small_data())
    # was: "resumed", then "optimizer 'AdamW' from plugtrain-optimizers raised KeyError"
    assert str(refused.value).startswith(
        f"{path}: does not fit this run: optimizer: its state failed at the first step after "
        "loading it (KeyError: 'exp_avg'); a state key _LazyAdamW needs is missing or renamed"
    ), str(refused.value)
