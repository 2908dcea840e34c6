"""Checkpoints are verified before they are trusted, and only sound ones are written.

A flipped bit, a truncated or empty newest file is found when loading (zip CRC-32, structure)
and resuming falls back to the newest sound checkpoint with a warning naming the bad one.
Non-finite weights are never saved nor called good, and ``nan_policy: skip_step`` gives up after
``loop.max_consecutive_skips`` skips in a row. A checkpoint of another model or optimizer is an
error naming the file and the first key that differs, before anything is loaded.
``checkpoint_name`` holds ``{step}`` exactly once.
"""

from __future__ import annotations

import logging
import math
import zipfile
from pathlib import Path

import pytest
import torch
from support.reliability import (
    assert_positioned_config_error,
    finish_process,
    last_line,
    run_cli,
    small_data,
    small_trainer,
    start_plugtrain,
    tmpfs,
    write_train_run,
)

import plugtrain
from plugtrain.builtin.models import MLP
from plugtrain.errors import (
    CheckpointError,
    CheckpointMismatchError,
    ConfigError,
    CorruptCheckpointError,
    TrainingError,
)
from plugtrain.train.checkpointing.storage.archive import (
    find_latest,
    load_checkpoint,
    save_checkpoint,
)
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _trainer(model_dir: Path, **changes: object) -> Trainer:
    return small_trainer(model_dir, checkpoint_steps=10, **changes)


def _data() -> torch.utils.data.DataLoader:
    return small_data()


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        assert torch.equal(value, b[name]), name


def _flip_a_bit_in(path: Path, tensor: torch.Tensor) -> str:
    """Flip one bit inside ``tensor``'s bytes in the file; returns the zip entry it lies in."""
    data = bytearray(path.read_bytes())
    needle = tensor.contiguous().numpy().tobytes()[:64]
    offset = data.find(needle)
    assert offset > 0
    assert data.find(needle, offset + 1) == -1
    data[offset + 17] ^= 0x10
    path.write_bytes(bytes(data))
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            if start <= offset < start + info.compress_size:
                return info.filename
    raise AssertionError("the weight is in no entry")


# -- damaged files -------------------------------------------------------------------------------


def test_c01_a_flipped_bit_in_a_weight_is_found_and_resuming_falls_back(tmp_path, caplog):
    straight = _trainer(tmp_path / "straight")
    straight.fit(_data())
    model_dir = tmp_path / "cut"
    _trainer(model_dir).fit(_data())
    newest = model_dir / "checkpoint_20.mdl"
    weight = load_checkpoint(newest)["model"]["fc1.weight"]
    entry = _flip_a_bit_in(newest, weight)

    # torch alone loads the damaged file without a word, with a different weight.
    loaded = torch.load(newest, weights_only=True)["model"]["fc1.weight"]
    assert not torch.equal(loaded, weight)
    with pytest.raises(CorruptCheckpointError) as info:
        load_checkpoint(newest)
    assert str(info.value) == (
        f"{newest}: not a readable plugtrain checkpoint: the entry {entry} does not match "
        "its CRC-32 checksum"
    )

    resumed = _trainer(model_dir, loop={"max_steps": 20})
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        resumed.fit(_data())
    messages = [r.getMessage() for r in caplog.records]
    assert f"skipping a bad checkpoint: {info.value}; trying the older checkpoint_10.mdl" in (
        messages
    )
    assert f"resumed from {model_dir / 'checkpoint_10.mdl'} at step 10" in messages
    _assert_same(straight.model.state_dict(), resumed.model.state_dict())
    _assert_same(load_checkpoint(newest)["model"], straight.model.state_dict())  # rewritten

    explicit = _trainer(tmp_path / "other")
    _flip_a_bit_in(newest, load_checkpoint(newest)["model"]["fc1.weight"])
    with pytest.raises(CorruptCheckpointError):  # a named checkpoint has no fallback
        explicit.fit(_data(), ckpt_path=newest)
    assert explicit.global_step == 0


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "not_a_checkpoint"])
def test_c02_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(damage, tmp_path, caplog):
    straight = _trainer(tmp_path / "straight")
    straight.fit(_data())
    model_dir = tmp_path / "cut"
    _trainer(model_dir).fit(_data())
    newest = model_dir / "checkpoint_20.mdl"
    size = newest.stat().st_size
    expected = {
        "truncated": f"not a complete zip archive ({size // 2} bytes; truncated?)",
        "empty": "the file is empty",
        "garbage": "not a complete zip archive (7 bytes; truncated?)",
        "not_a_checkpoint": "not a plugtrain checkpoint (no model state)",
    }[damage]
    if damage == "truncated":
        newest.write_bytes(newest.read_bytes()[: size // 2])
    elif damage == "empty":
        newest.write_bytes(b"")
    elif damage == "garbage":
        newest.write_bytes(b"garbage")
    else:
        save_checkpoint(newest, {"weights": torch.zeros(3)})

    resumed = _trainer(model_dir)
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        resumed.fit(_data())
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"skipping a bad checkpoint: {newest}: ")
    assert expected in warning
    assert warning.endswith("; trying the older checkpoint_10.mdl")
    _assert_same(straight.model.state_dict(), resumed.model.state_dict())
    assert load_checkpoint(newest)["global_step"] == 20


@pytest.mark.slow
def test_c02_plugtrain_fit_resumes_past_a_truncated_checkpoint(tmp_path):
    run = write_train_run(tmp_path, steps=20, every=10)
    assert run_cli("fit", str(run)).status == 0  # the checkpoints to damage, made in this process
    newest = tmp_path / "model/checkpoint_20.mdl"
    newest.write_bytes(newest.read_bytes()[:1000])
    run = write_train_run(tmp_path, steps=25, every=10)
    outcome = finish_process(start_plugtrain("fit", str(run)))
    assert outcome.status == 0, outcome.err
    assert f"plugtrain: skipping a bad checkpoint: {newest}: not a readable" in outcome.err
    assert f"resumed from {tmp_path / 'model/checkpoint_10.mdl'} at step 10" in outcome.err
    assert load_checkpoint(tmp_path / "model/checkpoint_25.mdl")["global_step"] == 25


# -- non-finite weights --------------------------------------------------------------------------


class PoisonWeights:
    """A callback that writes a NaN into ``fc1.weight`` at the end of step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_step_end(self, trainer: Trainer, metrics: object) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                trainer.model.fc1.weight[0, 0] = math.nan


def test_c03_non_finite_weights_are_never_saved_nor_called_good(tmp_path):
    trainer = _trainer(tmp_path, checkpoint={"steps": 5}, callbacks=[PoisonWeights(10)])
    with pytest.raises(TrainingError) as info:
        trainer.fit(_data())
    assert str(info.value) == (
        "the weights are not finite at step 10 (NaN or infinity in fc1.weight); no checkpoint "
        f"written; training stopped; the last good checkpoint is {tmp_path / 'checkpoint_5.mdl'}"
    )
    assert sorted(p.name for p in tmp_path.glob("*.mdl")) == ["checkpoint_5.mdl"]


def test_c03_skip_step_stops_when_the_weights_are_gone(tmp_path):
    trainer = _trainer(
        tmp_path,
        checkpoint={"steps": 5},
        loop={"max_steps": 20, "nan_policy": "skip_step"},
        callbacks=[PoisonWeights(7)],
    )
    with pytest.raises(TrainingError) as info:
        trainer.fit(_data())
    assert str(info.value) == (
        "the weights are not finite at step 8 (NaN or infinity in fc1.weight): skipping steps "
        "cannot recover them; training stopped; the last good checkpoint is "
        f"{tmp_path / 'checkpoint_5.mdl'}"
    )


def test_c03_a_checkpoint_with_non_finite_weights_on_disk_is_skipped(tmp_path, caplog):
    _trainer(tmp_path, loop={"max_steps": 10}, checkpoint={"steps": 5}).fit(_data())
    state = load_checkpoint(tmp_path / "checkpoint_10.mdl")
    state["model"]["fc2.bias"][1] = math.inf  # as an older version could have written it
    save_checkpoint(tmp_path / "checkpoint_10.mdl", state)
    resumed = _trainer(tmp_path, loop={"max_steps": 10})
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        resumed.fit(_data())
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning == (
        f"skipping a bad checkpoint: {tmp_path / 'checkpoint_10.mdl'}: holds non-finite weights "
        "(NaN or infinity in model.fc2.bias); trying the older checkpoint_5.mdl"
    )
    assert all(
        torch.isfinite(v).all()
        for v in load_checkpoint(tmp_path / "checkpoint_10.mdl")["model"].values()
    )


def _nan_from(first: int) -> object:
    calls = {"n": 0}

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        value = torch.nn.functional.cross_entropy(outputs, targets)
        return value * math.nan if calls["n"] >= first else value

    return loss


@pytest.mark.parametrize("limit", [None, 3])
def test_c04_skip_step_stops_after_a_bounded_number_of_skips_in_a_row(limit, tmp_path):
    loop: dict[str, object] = {"max_steps": 60, "nan_policy": "skip_step"}
    if limit is not None:
        loop["max_consecutive_skips"] = limit
    trainer = _trainer(tmp_path, loop=loop, checkpoint={"steps": 5}, loss_fn=_nan_from(3))
    with pytest.raises(TrainingError) as info:
        trainer.fit(_data())
    count = limit or 10
    last = 2 + count  # the step whose loss was the last straw: it is not taken
    saved = (last - 1) // 5 * 5
    kept = (
        f"the last good checkpoint is {tmp_path / f'checkpoint_{saved}.mdl'}"
        if saved
        else "no checkpoint of this fit was saved"
    )
    assert str(info.value) == (
        f"the loss was not finite for {count} steps in a row (steps 3 to {last}, nan_policy: "
        f"skip_step); training stopped; {kept} (loop.max_consecutive_skips sets how many)"
    )
    assert trainer.global_step == last - 1


def test_c04_max_consecutive_skips_is_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"loop\.max_consecutive_skips: must be > 0"):
        _trainer(tmp_path, loop={"max_steps": 3, "max_consecutive_skips": 0})
    run = write_train_run(tmp_path, steps=5, every=5)
    text = run.read_text().replace("{max_steps: 5}", "{max_steps: 5, max_consecutive_skips: -1}")
    run.write_text(text)
    assert_positioned_config_error(run_cli("check", str(run)), run, text)


@pytest.mark.slow
def test_c04_a_diverging_run_under_skip_step_exits_1_with_only_finite_checkpoints(tmp_path):
    run = write_train_run(tmp_path, steps=60, every=10, lr="1.0e+30")
    text = run.read_text().replace("{max_steps: 60}", "{max_steps: 60, nan_policy: skip_step}")
    run.write_text(text)
    outcome = finish_process(start_plugtrain("fit", str(run)))
    assert outcome.status == 1, outcome.err
    assert "Traceback" not in outcome.err
    last = last_line(outcome.err)
    assert last.startswith("plugtrain: error: the "), last
    assert "training stopped" in last
    assert outcome.err.count("its update was skipped") <= 10
    for path in (tmp_path / "model").glob("*.mdl"):
        weights = load_checkpoint(path)["model"]
        assert all(torch.isfinite(v).all() for v in weights.values()), path


# -- checkpoints of another run ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("change", ["model", "optimizer"])
def test_c05_a_checkpoint_of_another_model_or_optimizer_is_an_error_naming_the_key(
    change, tmp_path
):
    first = write_train_run(tmp_path, steps=10, every=10)
    assert run_cli("fit", str(first)).status == 0  # the checkpoint of another run, made here
    if change == "model":
        second = write_train_run(tmp_path, steps=20, every=10, hidden=32)
        detail = "model.fc1.weight: shape [16, 64] in the checkpoint, [32, 64] in this model"
    else:
        second = write_train_run(
            tmp_path, steps=20, every=10, **{"SGD: {lr: 0.05, momentum: 0.9}": "AdamW: {lr: 0.001}"}
        )
        detail = (
            "optimizer.param_groups.0.betas: missing from the checkpoint, which holds another "
            "optimizer's state (written by SGD, this run uses AdamW)"
        )
    outcome = finish_process(start_plugtrain("fit", str(second)))
    assert outcome.status == 1, outcome.err
    assert "internal error" not in outcome.err
    assert "resumed" not in outcome.err
    checkpoint = tmp_path / "model/checkpoint_10.mdl"
    assert last_line(outcome.err) == (
        f"plugtrain: error: {checkpoint}: does not fit this run: {detail}"
    )
    assert sorted(p.name for p in (tmp_path / "model").glob("*.mdl")) == ["checkpoint_10.mdl"]


def test_c05_nothing_is_changed_by_a_checkpoint_that_does_not_fit(tmp_path):
    _trainer(tmp_path / "a", loop={"max_steps": 5}).fit(_data())
    wide = _trainer(tmp_path / "b", model=lambda: MLP(in_features=16, out_features=4, hidden=48))
    before = {k: v.clone() for k, v in wide.model.state_dict().items()}
    with pytest.raises(CheckpointMismatchError, match=r"model\.fc1\.weight: shape \[32, 16\]"):
        wide.load_checkpoint(tmp_path / "a/checkpoint_5.mdl")
    _assert_same(before, wide.model.state_dict())
    assert wide.global_step == 0
    fewer = _trainer(
        tmp_path / "c", schedulers=[lambda opt: torch.optim.lr_scheduler.StepLR(opt, 5)]
    )
    with pytest.raises(CheckpointMismatchError, match="schedulers: 0 scheduler states in the"):
        fewer.load_checkpoint(tmp_path / "a/checkpoint_5.mdl")


class TorchSGD(torch.optim.SGD):
    """A subclass of torch's SGD, as a run-file plugin might register."""


def test_c05_a_checkpoint_of_the_same_algorithm_by_another_class_still_loads(tmp_path):
    written = _trainer(
        tmp_path,
        loop={"max_steps": 5},
        optimizer=lambda model: TorchSGD(model.parameters(), lr=0.05, momentum=0.9),
    )
    written.fit(_data())
    resumed = _trainer(tmp_path, loop={"max_steps": 5})  # the plugin's SGD: more switches
    resumed.load_checkpoint(tmp_path / "checkpoint_5.mdl")
    assert resumed.global_step == 5
    adamw = plugtrain.resolve("optimizer", "AdamW")
    other = _trainer(tmp_path, optimizer=lambda model: adamw(model.parameters(), lr=0.001))
    with pytest.raises(CheckpointMismatchError, match=r"written by TorchSGD, this run uses AdamW"):
        other.load_checkpoint(tmp_path / "checkpoint_5.mdl")


# -- checkpoint_name -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["ckpt_{epoch}_{step}.mdl", "c{step}_{step}.mdl", "ckpt.mdl", "{step:04d}.mdl", "a}{step}"],
)
def test_c06_checkpoint_name_must_hold_step_exactly_once(name, tmp_path):
    run = write_train_run(tmp_path, steps=5, every=5)
    text = run.read_text().replace("{steps: 5}", f'{{steps: 5, checkpoint_name: "{name}"}}')
    run.write_text(text)
    outcome = run_cli("check", str(run))
    assert_positioned_config_error(outcome, run, text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "checkpoint_name: " in t)
    column = text.splitlines()[line - 1].index("checkpoint_name: ") + 1  # at the key
    expected = (
        f"{run}:{line}:{column}: trainer.init.checkpoint.checkpoint_name: must "
        f"hold '{{step}}' "
        f"exactly once and no other '{{' or '}}', got {name!r}"
    )
    assert expected in outcome.err, outcome.err
    with pytest.raises(ConfigError, match=r"checkpoint\.checkpoint_name: must hold"):
        _trainer(tmp_path, checkpoint={"checkpoint_name": name})


def test_c06_a_valid_checkpoint_name_saves_and_resumes(tmp_path, caplog):
    named = {"steps": 5, "checkpoint_name": "ckpt-{step}.pt"}
    _trainer(tmp_path, loop={"max_steps": 10}, checkpoint=named).fit(_data())
    assert find_latest(tmp_path, "ckpt-{step}.pt") == tmp_path / "ckpt-10.pt"
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        _trainer(tmp_path, loop={"max_steps": 12}, checkpoint=named).fit(_data())
    assert f"resumed from {tmp_path / 'ckpt-10.pt'} at step 10" in caplog.messages


@pytest.mark.parametrize("background", [False, True], ids=["sync", "async_save"])
def test_c10_a_dcp_save_on_a_full_disk_fails_by_name_and_leaves_no_checkpoint(tmp_path, background):
    from plugtrain.train.checkpointing.storage.dcp import DCPCheckpointer

    with tmpfs(tmp_path, "1m") as disk:
        template = {"model": {"w": torch.zeros(600_000)}, "optimizer": None}  # 2.4 MB
        checkpointer = DCPCheckpointer(
            disk, "checkpoint_{step}", lambda _: template, async_save=background
        )
        state = {"model": {"w": torch.ones(600_000)}, "global_step": 4, "optimizer": None}
        final = disk / "checkpoint_4"

        def save_and_wait() -> None:
            checkpointer.save(4, state)
            checkpointer.wait()  # a background save fails where it is waited for

        with pytest.raises(CheckpointError) as info:
            save_and_wait()
        assert str(info.value).startswith(f"{final}: ")
        assert "No space left on device" in str(info.value), info.value
        assert not final.exists()
        assert checkpointer.list_checkpoints() == []
        assert [p.name for p in checkpointer.clean_up()] == [".checkpoint_4.partial"]
