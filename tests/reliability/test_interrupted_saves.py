"""Runs that meet a read-only results folder, a repeated signal mid-save, or an empty batch.

``validate`` of a published (read-only) run still evaluates and says where the metrics could
not go; a second SIGTERM that lands while the first one's checkpoint is written lets the save
finish; a batch with no example is named as such, not as a NaN loss.
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Iterator

import pytest
import torch
from support.reliability import (
    finish_process,
    last_line,
    run_subprocess,
    small_trainer,
    start_plugtrain,
    tmpfs,
    wait_until,
    write_train_run,
)

from plugtrain.errors import TrainingError
from plugtrain.train.checkpointing.storage.archive import load_checkpoint

pytestmark = pytest.mark.usefixtures("fresh_backend")

VALIDATE = """\
  validate:
    val_dataloader: {Digits: {batch_size: 64, split: val}}
"""


@pytest.mark.slow
def test_v03_validate_of_a_read_only_model_dir_evaluates_and_says_where_metrics_went(tmp_path):
    with tmpfs(tmp_path, "4m") as disk:
        run = write_train_run(disk, steps=5, every=5)
        run.write_text(run.read_text() + VALIDATE)
        trained = run_subprocess("fit", str(run))
        assert trained.status == 0, trained.err
        remount = ["mount", "-o", "remount,ro", str(disk)]
        assert subprocess.run(remount, capture_output=True, check=False).returncode == 0

        published = run_subprocess("validate", str(run))
        assert published.status == 0, published.err  # was exit 1: OSError in on_validate_start
        assert "Traceback" not in published.err
        model_dir = disk / "model"
        advice = (
            f"plugtrain: metrics: {model_dir} cannot be written (Read-only file system); "
            "evaluating anyway, the results are only printed. To keep them in files, run with "
            "--set trainer.init.model_dir=A_WRITABLE_FOLDER "
            f"--set trainer.init.checkpoint.checkpoint_root={model_dir}"
        )
        assert advice in published.err.splitlines(), published.err
        assert "validation at step 5: loss " in published.err
        assert published.out.startswith("trainer 0: validation loss ")

        # The advice, run as written, evaluates the same checkpoint into a writable folder.
        elsewhere = tmp_path / "elsewhere"
        setting = advice.split("run with ")[1].replace("A_WRITABLE_FOLDER", str(elsewhere))
        kept = run_subprocess("validate", str(run), *setting.split())
        assert kept.status == 0, kept.err
        assert kept.out == published.out
        rows = (elsewhere / "metrics.jsonl").read_text().splitlines()
        assert len(rows) == 1
        assert '"step": 5, "split": "val"' in rows[0]


@pytest.mark.slow
def test_i16_a_second_sigterm_while_the_first_ones_checkpoint_is_written(tmp_path):
    # About 40 MB per checkpoint (weights and momentum): writing one takes a while, long enough
    # for the second signal to land inside the write.
    run = write_train_run(
        tmp_path, steps=500, every=5, hidden=64_000, **{"log_steps: 5": "log_steps: 1"}
    )
    model_dir = tmp_path / "model"
    metrics = model_dir / "metrics.jsonl"
    process = start_plugtrain("fit", str(run))
    # The first signal comes after step 6, which is no checkpoint step: stopping saves anew.
    wait_until(lambda: metrics.exists() and '"step": 6,' in metrics.read_text(), process)
    process.send_signal(signal.SIGTERM)

    def stop_save_is_being_written() -> bool:
        partial = [p for p in model_dir.glob(".checkpoint_*.mdl.*") if "_5.mdl" not in p.name]
        return any(p.exists() and p.stat().st_size > 0 for p in partial)

    wait_until(stop_save_is_being_written, process)
    process.send_signal(signal.SIGTERM)
    outcome = finish_process(process)

    assert outcome.status == 143, outcome.err  # was 1: "cannot be written (RuntimeError: ..."
    assert "Traceback" not in outcome.err
    prefix = "plugtrain: interrupted by SIGTERM at step "
    last = last_line(outcome.err)
    assert last.startswith(prefix), last
    step = int(last[len(prefix) :].split(";")[0])
    saved = model_dir / f"checkpoint_{step}.mdl"
    assert last == (
        f"{prefix}{step}; checkpoint saved to {saved}; run the same command again to resume "
        "(SIGTERM came again during the save, which was finished first)"
    )
    assert load_checkpoint(saved)["global_step"] == step
    assert not list(model_dir.glob(".checkpoint_*"))


class _OneEmptyBatch:
    """Seeded batches of 16 examples (16 features, 4 classes); batch ``empty`` holds none."""

    def __init__(self, empty: int, batches: int = 40) -> None:
        self.empty, self.batches = empty, batches

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        generator = torch.Generator().manual_seed(0)
        for index in range(self.batches):
            size = 0 if index == self.empty else 16
            features = torch.randn(size, 16, generator=generator)
            yield features, torch.randint(0, 4, (size,), generator=generator)


def test_i17_an_empty_batch_is_named_as_the_cause_of_the_nan_loss(tmp_path, caplog):
    trainer = small_trainer(tmp_path / "stop", max_steps=30, checkpoint_steps=10)
    with pytest.raises(TrainingError) as stopped:
        trainer.fit(_OneEmptyBatch(empty=24))  # the 25th batch
    assert str(stopped.value) == (
        "the loss is nan at step 25: its batch holds no example (the training data yielded an "
        f"empty batch); training stopped; the last good checkpoint is {tmp_path}/stop/"
        "checkpoint_20.mdl (loop.nan_policy: skip_step drops such steps instead)"
    )  # was: "the loss is nan at step 25; training stopped; ..." with no word of the batch

    skipping = small_trainer(
        tmp_path / "skip",
        max_steps=30,
        checkpoint_steps=10,
        loop={"max_steps": 30, "nan_policy": "skip_step", "grad_accum_steps": 2},
    )
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        skipping.fit(_OneEmptyBatch(empty=24, batches=80))  # step 13's first micro-batch
    assert (
        "step 13: the loss is nan: 1 of its 2 micro-batches hold no example (the training data "
        "yielded an empty batch); its update was skipped (nan_policy: skip_step)"
    ) in caplog.text
    assert skipping.global_step == 30
