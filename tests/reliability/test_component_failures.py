"""A callback or logger that raises costs no training work (I11-I13).

Real Trainers writing real checkpoints; the failing components are plain Python-API objects.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from support.reliability import small_data, small_trainer

from plugtrain.errors import ComponentFailedError, ConfigError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint


class FailingCallback:
    """Raises ``ValueError`` in ``hook`` at ``step``."""

    def __init__(self, hook: str, step: int) -> None:
        self.hook, self.step = hook, step

    def on_train_step_end(self, trainer: Any, metrics: Any) -> None:
        if self.hook == "on_train_step_end" and trainer.global_step == self.step:
            raise ValueError("boom")

    def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        if self.hook == "on_before_optimizer_step" and trainer.global_step + 1 == self.step:
            raise ValueError("boom")


class FlakyLogger:
    """A remote logger whose server goes away at ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.steps: list[int] = []

    def log_metrics(self, step: int, split: str, metrics: Any) -> None:
        if step >= self.step:
            raise ConnectionError("the tracking server closed the connection")
        self.steps.append(step)

    def close(self) -> None:
        """Nothing to close."""


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: Any) -> dict[str, torch.Tensor]:
    trainer = small_trainer(tmp_path_factory.mktemp("whole"), max_steps=20, checkpoint_steps=5)
    trainer.fit(small_data())
    return {k: v.clone() for k, v in trainer.unwrapped_model.state_dict().items()}


def test_i11_a_failing_callback_saves_the_last_step_then_stops_naming_it(tmp_path, uninterrupted):
    model_dir = tmp_path / "run"
    failing = small_trainer(model_dir, callbacks=[FailingCallback("on_train_step_end", 7)])
    with pytest.raises(ComponentFailedError) as stopped:
        failing.fit(small_data())
    assert re.fullmatch(
        r"callback FailingCallback \(\S+\.FailingCallback\) raised ValueError in "
        r"on_train_step_end: boom \(at step 7\); training stopped; checkpoint of step 7 saved "
        rf"to {re.escape(str(model_dir / 'checkpoint_7.mdl'))}; fix or remove it and run the "
        r"same command again to resume",
        str(stopped.value),
    ), str(stopped.value)
    assert isinstance(stopped.value.__cause__, ValueError)
    assert load_checkpoint(model_dir / "checkpoint_7.mdl")["global_step"] == 7
    resumed = small_trainer(model_dir)
    resumed.fit(small_data())
    assert resumed.loaded_step == 7
    for name, value in resumed.unwrapped_model.state_dict().items():
        assert torch.equal(value, uninterrupted[name]), name


def test_i12_a_failing_logger_stops_after_saving_or_is_dropped_with_on_error_continue(tmp_path):
    stops = FlakyLogger(step=6)
    trainer = small_trainer(tmp_path / "stop", loggers=[stops])
    with pytest.raises(ComponentFailedError) as stopped:
        trainer.fit(small_data())
    assert "logger FlakyLogger (" in str(stopped.value)
    assert "raised ConnectionError in log_metrics: the tracking server closed the connection" in (
        str(stopped.value)
    )
    assert "(at step 6); training stopped; checkpoint of step 6 saved to " in str(stopped.value)
    assert load_checkpoint(tmp_path / "stop" / "checkpoint_6.mdl")["global_step"] == 6
    goes_on = FlakyLogger(step=6)
    trainer = small_trainer(
        tmp_path / "go-on",
        loggers=[goes_on],
        logging={"log_steps": 1, "on_error": {"FlakyLogger": "continue"}},
    )
    trainer.fit(small_data())
    assert trainer.global_step == 20
    assert goes_on.steps == [1, 2, 3, 4, 5]  # never called again after failing
    assert (tmp_path / "go-on" / "checkpoint_20.mdl").exists()
    with pytest.raises(ConfigError, match="'Nope' is none of this trainer's loggers"):
        small_trainer(tmp_path / "x", logging={"log_steps": 1, "on_error": {"Nope": "continue"}})


def test_i13_a_failure_in_the_middle_of_a_step_names_the_newest_checkpoint(tmp_path):
    model_dir = tmp_path / "run"
    failing = small_trainer(model_dir, callbacks=[FailingCallback("on_before_optimizer_step", 8)])
    with pytest.raises(ComponentFailedError) as stopped:
        failing.fit(small_data())
    assert str(stopped.value).endswith(
        "in on_before_optimizer_step: boom (at step 7); training stopped; no checkpoint written "
        f"(step 8 was half done); the newest is {model_dir / 'checkpoint_5.mdl'}; fix or remove "
        "it and run the same command again to resume"
    )
    assert sorted(p.name for p in model_dir.glob("checkpoint_*")) == ["checkpoint_5.mdl"]


def test_i15_tensorboard_on_a_full_disk_saves_and_names_the_logger_without_a_thread_trace(
    tmp_path, capfd
):
    pytest.importorskip("tensorboard")
    import contextlib
    import os
    import shutil
    import subprocess

    import plugtrain

    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:

        class FillDisk:
            def on_train_step_end(self, trainer: Any, metrics: Any) -> None:
                if trainer.global_step == 4:
                    with contextlib.suppress(OSError), (disk / "filler").open("wb") as handle:
                        while True:
                            handle.write(b"\0" * 4096)
                            handle.flush()

        board = plugtrain.resolve("logger", "TensorBoardLogger")(summary_dir=str(disk / "tb"))
        model_dir = tmp_path / "run"
        trainer = small_trainer(model_dir, callbacks=[FillDisk()], loggers=[board])
        with pytest.raises(ComponentFailedError) as stopped:
            trainer.fit(small_data())
        message = str(stopped.value)
        assert message.startswith("logger 'TensorBoardLogger' from plugtrain-callbacks "), message
        assert "No space left on device" in message
        step = trainer.global_step
        assert f"training stopped; checkpoint of step {step} saved to " in message
        assert load_checkpoint(model_dir / f"checkpoint_{step}.mdl")["global_step"] == step
        err = capfd.readouterr().err
        assert "Exception in thread" not in err  # was: the writer thread's raw traceback
        assert "Traceback" not in err
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
