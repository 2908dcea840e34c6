"""Resuming a checkpoint another version wrote, or loading part of one into a finished run.

A checkpoint of another major version (a pre-release included) is refused by the version
check; an optimizer state under other key names is refused before "resumed" is logged; a
fine-tuning that loads only the model of the same folder keeps the earlier run's metrics.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from support.reliability import small_data, small_trainer

import plugtrain
from plugtrain.errors import CheckpointMismatchError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _adamw_trainer(model_dir: Path, steps: int, **changes: Any) -> Any:
    adamw = plugtrain.resolve("optimizer", "AdamW")
    return small_trainer(
        model_dir,
        max_steps=steps,
        optimizer=lambda model: adamw(model.parameters(), lr=0.01),
        **changes,
    )


@pytest.fixture(scope="module")
def adamw_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding checkpoints 5 and 10 of an AdamW run (every step logged)."""
    model_dir = tmp_path_factory.mktemp("adamw")
    _adamw_trainer(model_dir, 10).fit(small_data())
    return model_dir


def _copy_with(source: Path, target: Path, change: Any) -> Path:
    state = load_checkpoint(source)
    change(state)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(target, state)
    return target


def test_r13_a_pre_release_of_another_major_version_is_refused(tmp_path, adamw_run, caplog):
    def written_by_1_0rc1(state: dict[str, Any]) -> None:
        state["metadata"] = {**state["metadata"], "plugtrain": "1.0rc1"}

    model_dir = tmp_path / "run"
    path = _copy_with(
        adamw_run / "checkpoint_10.mdl", model_dir / "checkpoint_10.mdl", written_by_1_0rc1
    )
    with (
        caplog.at_level(logging.INFO, logger="plugtrain"),
        pytest.raises(CheckpointMismatchError) as refused,
    ):
        _adamw_trainer(model_dir, 20).fit(small_data())
    assert str(refused.value) == (
        f"{path}: written by plugtrain 1.0rc1, this is plugtrain {plugtrain.__version__} (a "
        "pre-release of another major.minor version); set "
        "trainer.init.checkpoint.strict_version: false to load it anyway"
    )  # was: "written by plugtrain '1.0rc1', not a version; loading it anyway"
    assert "resumed" not in caplog.text

    caplog.clear()
    lenient = _adamw_trainer(model_dir, 12, checkpoint={"steps": 5, "strict_version": False})
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        lenient.fit(small_data())
    assert "(a pre-release of another major.minor version); loading it anyway" in caplog.text
    assert lenient.global_step == 12


def test_r14_an_optimizer_state_under_other_keys_is_refused_before_resumed(
    tmp_path, adamw_run, caplog
):
    def renamed(state: dict[str, Any]) -> None:  # as another version of the plugin might
        for per_parameter in state["optimizer"]["state"].values():
            per_parameter["m"] = per_parameter.pop("exp_avg")

    model_dir = tmp_path / "run"
    path = _copy_with(adamw_run / "checkpoint_10.mdl", model_dir / "checkpoint_10.mdl", renamed)
    trainer = _adamw_trainer(model_dir, 20)
    before = {k: v.clone() for k, v in trainer.unwrapped_model.state_dict().items()}
    with (
        caplog.at_level(logging.INFO, logger="plugtrain"),
        pytest.raises(CheckpointMismatchError) as refused,
    ):
        trainer.fit(small_data())
    assert str(refused.value) == (
        f"{path}: does not fit this run: optimizer.state.0: exp_avg missing from the "
        "checkpoint, which holds step, exp_avg_sq, m (AdamW keeps step, exp_avg, exp_avg_sq; "
        "was the checkpoint written by another version of the optimizer?)"
    )
    assert "resumed" not in caplog.text  # was: "resumed from ... at step 10", then step 11 failed
    assert trainer.global_step == 0
    after = trainer.unwrapped_model.state_dict()
    assert all(before[k].equal(after[k]) for k in before)  # nothing was changed

    # torch's own AdamW creates its state at its first step: a scratch step is the reference.
    torch_model_dir = tmp_path / "torch"

    def torch_adamw(steps: int) -> Any:
        import torch

        return small_trainer(
            torch_model_dir,
            max_steps=steps,
            optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=0.01),
        )

    torch_adamw(5).fit(small_data())
    _copy_with(torch_model_dir / "checkpoint_5.mdl", torch_model_dir / "checkpoint_5.mdl", renamed)
    with pytest.raises(CheckpointMismatchError, match=r"optimizer\.state\.0: exp_avg missing"):
        torch_adamw(10).fit(small_data())


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_r15_fine_tuning_the_model_of_a_finished_run_in_its_folder_keeps_its_metrics(
    tmp_path, caplog
):
    model_dir = tmp_path / "run"
    small_trainer(model_dir, max_steps=20).fit(small_data())
    assert _steps(model_dir / "metrics.jsonl") == list(range(1, 21))
    load_states = plugtrain.resolve("callback", "LoadCheckpointStates")
    tuning = small_trainer(
        model_dir, max_steps=8, callbacks=[load_states(load_checkpoint_states="model")]
    )
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        tuning.fit(small_data())
    assert "removed" not in caplog.text  # was: "metrics: removed 20 rows after step 0"
    kept = sorted(model_dir.glob("metrics.before-*.jsonl"))
    assert len(kept) == 1
    assert _steps(kept[0]) == list(range(1, 21))
    assert f"metrics: the earlier run's rows are kept in {kept[0]}" in caplog.text
    assert _steps(model_dir / "metrics.jsonl") == list(range(1, 9))
    assert len(list(model_dir.glob("metrics.before-*.csv"))) == 1


def _device_keys(path: Path) -> dict[int, list[str]]:
    """Step -> the throughput keys of its training record."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["step"]: sorted(k for k in r if k.startswith("device/")) for r in records}


@pytest.mark.parametrize("resumed_at", [1, 6])
def test_r16_a_resumed_fit_logs_the_throughput_keys_of_an_uninterrupted_one(tmp_path, resumed_at):
    throughput = plugtrain.resolve("callback", "Throughput")

    def fit(model_dir: Path, steps: int) -> None:
        # peak_flops given: MFU needs no probe of this machine
        callbacks = [throughput(peak_flops=1e12)]
        small_trainer(
            model_dir, max_steps=steps, checkpoint_steps=resumed_at, callbacks=callbacks
        ).fit(small_data())

    fit(tmp_path / "straight", 10)
    fit(tmp_path / "cut", resumed_at)
    fit(tmp_path / "cut", 10)
    straight = _device_keys(tmp_path / "straight" / "metrics.jsonl")
    resumed = _device_keys(tmp_path / "cut" / "metrics.jsonl")
    assert list(resumed) == list(range(1, 11))
    assert resumed == straight  # was: step 7 (after resuming at 6) lacked flops_per_sec and mfu
    assert straight[1] == ["device/samples_per_sec"]  # step 1 is not counted (a warm-up)
    assert straight[10] == ["device/flops_per_sec", "device/mfu", "device/samples_per_sec"]
