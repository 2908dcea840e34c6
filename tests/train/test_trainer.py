"""The Trainer from Python: the seed's backend rules, the loop, metrics, checkpoints, resume."""

from __future__ import annotations

import json
import math

import attrs
import pytest
import torch

import plugtrain
from plugtrain import hookimpl
from plugtrain.builtin.data import synthetic_loader
from plugtrain.builtin.models import MLP
from plugtrain.errors import ConfigError, TrainingError
from plugtrain.train.checkpointing.storage.archive import (
    find_latest,
    load_checkpoint,
    save_checkpoint,
)
from plugtrain.train.trainer import Trainer

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _sgd():
    return plugtrain.resolve("optimizer", "SGD")


def _trainer(tmp_path, **changes):
    sgd = _sgd()
    arguments = {
        "device": "CPU",
        "model_dir": tmp_path / "run",
        "model": lambda: MLP(in_features=16, out_features=4, hidden=32, dropout=0.1),
        "optimizer": lambda model: sgd(model.parameters(), lr=0.05, momentum=0.9),
        "loop": {"max_steps": 20},
        "logging": {"log_steps": 5},
        "seed": 3,
    }
    arguments.update(changes)
    return Trainer(**arguments)


def _data(split="train", batch_size=16):
    return synthetic_loader(
        batch_size=batch_size, num_examples=128, in_features=16, num_classes=4, split=split
    )


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_device_and_backend_are_mutually_exclusive(tmp_path):
    with pytest.raises(ValueError, match="mutually exclusive") as info:
        _trainer(tmp_path, backend=plugtrain.backend("CPU"))
    assert str(info.value) == (
        "backend and device are mutually exclusive arguments of Trainer. "
        "Please only provide one or the other"
    )


@attrs.frozen
class FakeCSXArgs:
    """A stand-in backend of another type (test double)."""


class FakeCSXBackend:
    """Test double of a second backend type; it only claims its type."""

    backend_type = "FAKECSX"

    def __init__(self):
        from plugtrain.backend_base import claim_backend_type

        claim_backend_type(self.backend_type)


class FakeCSXPlugin:
    @hookimpl
    def plugtrain_register_backends(self, registry):
        registry.register("FAKECSX", f"{__name__}:FakeCSXBackend", schema=FakeCSXArgs)


def test_a_second_backend_type_in_one_process_is_refused_with_the_seed_text(
    tmp_path, register_plugin, monkeypatch
):
    import sys

    monkeypatch.setitem(sys.modules, __name__, sys.modules[__name__])
    register_plugin(FakeCSXPlugin(), name="fake_csx_double")
    plugtrain.backend("FAKECSX")
    with pytest.raises(RuntimeError) as info:
        _trainer(tmp_path, device="CPU")
    assert str(info.value) == (
        "Cannot instantiate multiple backends. "
        "A backend with type FAKECSX has already been instantiated."
    )


def test_one_backend_object_serves_several_trainers(tmp_path):
    backend = plugtrain.backend("cpu")
    first = _trainer(tmp_path, device=None, backend=backend)
    second = _trainer(tmp_path, device=None, backend=backend)
    assert first.backend is second.backend


def test_fit_trains_and_writes_metrics_and_a_checkpoint(tmp_path):
    trainer = _trainer(tmp_path, loop={"max_steps": 40, "eval_frequency": 20})
    metrics = trainer.fit(_data(), _data("val"))
    assert trainer.global_step == 40
    assert 0.0 <= metrics["accuracy"] <= 1.0
    records = [
        json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()
    ]
    train = [r for r in records if r["split"] == "train"]
    val = [r for r in records if r["split"] == "val"]
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert [r["step"] for r in val] == [20, 40]
    assert train[-1]["loss"] < train[0]["loss"]
    assert train[0]["lr/0"] == pytest.approx(0.05)
    assert train[0]["steps_per_second"] > 0
    csv_lines = (tmp_path / "run/metrics.csv").read_text().splitlines()
    assert csv_lines[0] == "step,split,name,value"
    assert find_latest(tmp_path / "run").name == "checkpoint_40.mdl"


def test_resuming_from_a_checkpoint_continues_bit_for_bit(tmp_path):
    straight = _trainer(tmp_path / "a", loop={"max_steps": 30})
    straight.fit(_data())
    first = _trainer(tmp_path / "b", loop={"max_steps": 13})
    first.fit(_data())
    resumed = _trainer(tmp_path / "b", loop={"max_steps": 30}, seed=99)  # seed must not matter
    resumed.fit(_data())
    assert resumed.global_step == 30
    for name, value in _weights(straight).items():
        assert torch.equal(value, _weights(resumed)[name]), name


def test_ckpt_path_none_starts_from_scratch(tmp_path):
    first = _trainer(tmp_path / "a", loop={"max_steps": 5})
    first.fit(_data())
    again = _trainer(tmp_path / "b", loop={"max_steps": 5})
    again.fit(_data(), ckpt_path=None)
    assert again.global_step == 5
    assert again.loaded_step is None
    for name, value in _weights(first).items():
        assert torch.equal(value, _weights(again)[name]), name


def test_grad_accumulation_equals_one_big_batch(tmp_path):
    sgd = _sgd()
    small = _trainer(
        tmp_path / "s",
        loop={"max_steps": 1, "grad_accum_steps": 2},
        model=lambda: MLP(in_features=16, out_features=4, hidden=32),
        optimizer=lambda m: sgd(m.parameters(), lr=0.1),
    )
    big = _trainer(
        tmp_path / "b",
        loop={"max_steps": 1},
        model=lambda: MLP(in_features=16, out_features=4, hidden=32),
        optimizer=lambda m: sgd(m.parameters(), lr=0.1),
    )
    data_small = synthetic_loader(
        batch_size=8, num_examples=16, in_features=16, num_classes=4, shuffle=False
    )
    data_big = synthetic_loader(
        batch_size=16, num_examples=16, in_features=16, num_classes=4, shuffle=False
    )
    small.fit(data_small)
    big.fit(data_big)
    for name, value in _weights(big).items():
        torch.testing.assert_close(_weights(small)[name], value, rtol=1e-5, atol=1e-7)


def test_num_epochs_counts_passes_over_the_data(tmp_path):
    trainer = _trainer(tmp_path, loop={"num_epochs": 2})
    trainer.fit(_data(batch_size=32))  # 128 examples: 4 batches per epoch
    assert trainer.global_step == 8


def test_two_schedulers_of_one_kind_on_one_group_are_refused(tmp_path):
    linear = plugtrain.resolve("scheduler", "LinearLR")

    def schedule(optimizer):
        return linear(optimizer, initial_learning_rate=0.1, end_learning_rate=0.0, total_iters=5)

    with pytest.raises(ConfigError, match="both set 'lr' of param group 0"):
        _trainer(tmp_path, schedulers=[schedule, schedule])


def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    calls = {"n": 0}

    def exploding(outputs, targets):
        calls["n"] += 1
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        return loss * math.inf if calls["n"] > 6 else loss

    trainer = _trainer(tmp_path, loss_fn=exploding, checkpoint={"steps": 5}, loop={"max_steps": 20})
    with pytest.raises(TrainingError, match=r"the loss is (inf|nan) at step 7.*checkpoint_5\.mdl"):
        trainer.fit(_data())
    load_checkpoint(tmp_path / "run/checkpoint_5.mdl")


def test_a_model_dir_that_cannot_be_written_is_detected_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    trainer = _trainer(tmp_path, model_dir=blocker / "run")
    with pytest.raises(TrainingError, match="cannot be written"):
        trainer.fit(_data())
    assert trainer.global_step == 0


def test_validate_loads_the_newest_checkpoint(tmp_path):
    trained = _trainer(tmp_path, loop={"max_steps": 10})
    trained.fit(_data())
    fresh = _trainer(tmp_path)
    metrics = fresh.validate(_data("val"))
    assert fresh.global_step == 10
    assert set(metrics) == {"loss", "accuracy"}
    assert metrics == trained.evaluate(_data("val"))


def test_checkpoints_are_written_atomically(tmp_path):
    path = save_checkpoint(tmp_path / "checkpoint_3.mdl", {"model": {}, "global_step": 3})
    save_checkpoint(tmp_path / "checkpoint_12.mdl", {"model": {}, "global_step": 12})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_12.mdl", "checkpoint_3.mdl"]
    assert find_latest(tmp_path).name == "checkpoint_12.mdl"
    assert load_checkpoint(path)["global_step"] == 3


def test_a_file_that_is_not_a_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "checkpoint_1.mdl"
    bad.write_bytes(b"garbage")
    from plugtrain.errors import CheckpointError

    with pytest.raises(CheckpointError, match="not a readable plugtrain checkpoint"):
        load_checkpoint(bad)


def test_callbacks_see_the_run(tmp_path):
    seen = []

    class Recorder:
        def on_fit_start(self, trainer):
            seen.append("start")

        def on_train_step_end(self, trainer, metrics):
            seen.append(trainer.global_step)

        def on_fit_end(self, trainer):
            seen.append("end")

    _trainer(tmp_path, callbacks=[Recorder()], loop={"max_steps": 10}).fit(_data())
    assert seen == ["start", 5, 10, "end"]
