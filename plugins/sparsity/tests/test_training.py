"""The built-in algorithms in real fits: levels, moving masks, exact resume, LogSparsity."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn

from plugtrain.train.trainer import Trainer


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batches(count: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(8, 8, generator=generator), torch.randint(0, 4, (8,), generator=generator))
        for _ in range(count)
    ]


class _Record:
    """The masks after every step, and the zeros the core promises."""

    def __init__(self) -> None:
        self.masks: list[dict[str, torch.Tensor]] = []

    def on_train_step_end(self, trainer: Any, metrics: dict[str, float]) -> None:
        step: dict[str, torch.Tensor] = {}
        for sparse in trainer.sparsity.parameters:
            pruned = ~sparse.mask
            assert torch.count_nonzero(sparse.param[pruned]) == 0
            for value in trainer.optimizer.state[sparse.param].values():
                if value.shape == sparse.param.shape:
                    assert torch.count_nonzero(value[pruned]) == 0
            step[sparse.name] = sparse.mask.clone()
        self.masks.append(step)


def _trainer(model_dir: Any, sparsity: Any, steps: int = 6, **extra: Any) -> Trainer:
    return Trainer(
        model_dir=model_dir,
        model=_model,
        optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=0.05),
        loop={"max_steps": steps},
        logging={"log_steps": 1},
        seed=0,
        sparsity=sparsity,
        **extra,
    )


@pytest.mark.parametrize("algorithm", ["set", "rigl"])
def test_set_and_rigl_keep_the_level_and_move_the_masks(tmp_path, algorithm):
    record = _Record()
    sparsity = {"algorithm": algorithm, "sparsity": 0.75, "drop_fraction": 0.5}
    trainer = _trainer(tmp_path, sparsity, callbacks=[record])
    trainer.fit(_batches(6))
    assert len(record.masks) == 6
    for step in record.masks:
        assert int(step["0.weight"].sum()) == 32  # trunc(0.25 * 128), after every update
        assert int(step["2.weight"].sum()) == 16
    moved = [
        int((after["0.weight"] ^ before["0.weight"]).sum())
        for before, after in zip(record.masks, record.masks[1:], strict=False)
    ]
    assert all(change > 0 for change in moved), moved
    assert set(trainer.model.state_dict()) >= {"0.weight_mask", "2.weight_mask"}


def test_gmp_follows_its_schedule(tmp_path):
    record = _Record()
    sparsity = {
        "algorithm": "gmp",
        "sparsity": {"type": "linear", "init": 0.0, "slope": 0.125},
        "update": {"freq": 2},
    }
    _trainer(tmp_path, sparsity, callbacks=[record]).fit(_batches(6))
    kept = [int(step["0.weight"].sum()) for step in record.masks]
    # updates after steps 2, 4, 6 at 0.25, 0.5, 0.75 of 128 weights
    assert kept == [128, 96, 96, 64, 64, 32]


def _groups() -> list[dict[str, Any]]:
    return [
        {
            "algorithm": "rigl",
            "sparsity": 0.5,
            "param_filter": "0.weight",
            "drop_fraction": {"type": "cosine", "init": 0.5, "half_period": 6},
            "balance_out_groups": 4,
        },
        {"algorithm": "set", "sparsity": [0.25, 0.5, 0.75], "update": {"freq": 2}},
    ]


def test_resume_from_a_checkpoint_file_is_bit_exact(tmp_path):
    straight = _trainer(tmp_path / "straight", _groups())
    straight.fit(_batches(6))
    first = _trainer(tmp_path / "resumed", _groups(), steps=3)
    first.fit(_batches(6))
    second = _trainer(tmp_path / "resumed", _groups())
    second.fit(_batches(6))  # autoloads checkpoint_3.mdl
    assert second.loaded_step == 3
    a, b = straight.model.state_dict(), second.model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    saved = torch.load(tmp_path / "resumed" / "checkpoint_6.mdl", weights_only=True)
    expected = torch.load(tmp_path / "straight" / "checkpoint_6.mdl", weights_only=True)
    assert saved["sparsity"] == [
        {"step": torch.tensor(6), "sparsity": {}},
        {"step": torch.tensor(6), "sparsity": {"2.weight": {"index": 1}}},
    ]
    assert saved["sparsity"] == expected["sparsity"]
    assert torch.equal(saved["sparsity_rng"], expected["sparsity_rng"])


def test_log_sparsity_writes_target_and_actual(tmp_path):
    sparsity = [
        {
            "algorithm": "gmp",
            "sparsity": {"type": "linear", "init": 0.25, "slope": 0.0625},
            "param_filter": "0.weight",
        },
        {"sparsity": 0.5},
    ]
    _trainer(tmp_path, sparsity, steps=2, callbacks=[{"LogSparsity": {}}]).fit(_batches(2))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    last = [r for r in map(json.loads, lines) if r["split"] == "train"][-1]
    values = {k: v for k, v in last.items() if k.startswith("sparsity/")}
    assert values == {
        "sparsity/0.weight*/target": 0.375,
        "sparsity/0.weight/actual": 0.375,
        "sparsity/2.weight*/target": 0.5,
        "sparsity/2.weight/actual": 0.5,
    }


def test_without_log_sparsity_nothing_is_logged(tmp_path):
    _trainer(tmp_path, 0.5, steps=1).fit(_batches(1))
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert not [k for k in record if k.startswith("sparsity/")]


BAD_BALANCE = """\
trainer:
  init:
    device: CPU
    model_dir: {model_dir}
    model: {{MLP: {{in_features: 6, hidden: 8, out_features: 3}}}}
    optimizer: {{SGD: {{lr: 0.1}}}}
    loop: {{max_steps: 2}}
    sparsity:
      algorithm: rigl
      sparsity: 0.5
      balance_out_groups: 5
  fit:
    train_dataloader:
      Synthetic: {{batch_size: 8, num_examples: 64, in_features: 6, num_classes: 3}}
"""


def test_a_runtime_error_of_a_run_file_names_the_group_and_its_position(tmp_path, fresh_backend):
    from plugtrain.testing import run_plugtrain, write_run_file

    run = write_run_file(tmp_path, BAD_BALANCE.format(model_dir=tmp_path / "model"))
    result = run_plugtrain("fit", run)
    assert result.status == 2
    assert result.err.strip() == (
        f"plugtrain: error: {run}:9:7: trainer.init.sparsity: RigL: Sparsity group configured "
        "with `balance_out_groups`=5 but parameter fc1.weight does not have a dimension with a "
        "multiple of 5: torch.Size([8, 6])"
    )


def test_python_forms_are_validated_like_a_run_file(tmp_path):
    from plugtrain.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^sparsity\.bogus: unknown argument 'bogus'\. "):
        _trainer(tmp_path, {"algorithm": "rigl", "sparsity": 0.5, "bogus": 1})
    with pytest.raises(ConfigError, match=r"balance_out_groups`=3 but parameter 0\.weight"):
        _trainer(tmp_path, {"algorithm": "rigl", "sparsity": 0.5, "balance_out_groups": 3})


def test_an_interrupted_run_resumes_bit_for_bit(tmp_path):
    import signal

    from plugtrain.train.distributed.signals import TrainingInterrupted

    class SignalAt:
        def on_train_step_end(self, trainer, metrics):
            if trainer.global_step == 4:
                signal.raise_signal(signal.SIGINT)

    straight = _trainer(tmp_path / "straight", _groups(), checkpoint={"steps": 3})
    straight.fit(_batches(6))
    cut = _trainer(tmp_path / "cut", _groups(), checkpoint={"steps": 3}, callbacks=[SignalAt()])
    with pytest.raises(TrainingInterrupted, match=r"^interrupted at step 4; checkpoint saved"):
        cut.fit(_batches(6))
    resumed = _trainer(tmp_path / "cut", _groups(), checkpoint={"steps": 3})
    resumed.fit(_batches(6))
    assert resumed.loaded_step == 4
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    for left, right in zip(straight.sparsity.algorithms, resumed.sparsity.algorithms, strict=True):
        assert left.state_dict() == right.state_dict()


def test_log_sparsity_does_nothing_without_sparsity_or_optimizer(tmp_path):
    from types import SimpleNamespace

    from plugtrain_sparsity.log import LogSparsity

    metrics = {"loss": 1.0}
    LogSparsity().on_train_step_end(SimpleNamespace(sparsity=None, optimizer=object()), metrics)
    trainer = Trainer(model_dir=tmp_path, model=_model, sparsity=0.5)  # no optimizer
    LogSparsity().on_train_step_end(trainer, metrics)
    assert metrics == {"loss": 1.0}


@pytest.mark.parametrize(
    ("parts", "resumed_step"),
    [("model,optimizer,global_step,sparsity", 6), ("model,optimizer,global_step", 3)],
)
def test_load_checkpoint_states_names_the_sparsity_part(tmp_path, parts, resumed_step):
    from plugtrain_callbacks.checkpoints import LoadCheckpointStates

    _trainer(tmp_path, _groups(), steps=3).fit(_batches(6))
    resumed = _trainer(tmp_path, _groups(), callbacks=[LoadCheckpointStates(parts)])
    resumed.fit(_batches(6))
    saved = torch.load(tmp_path / "checkpoint_6.mdl", weights_only=True)
    # The algorithms count from the checkpoint's step when their part is loaded, else from 0.
    assert [int(group["step"]) for group in saved["sparsity"]] == [resumed_step] * 2
