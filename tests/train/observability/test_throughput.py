"""The Throughput callback: tokens/s, samples/s and MFU, and its once-counted model FLOPs.

Its FLOP count of an optimizer step must equal ``torch.utils.flop_counter``'s count of the same
forward and backward passes, for the built-in MLP and for plugtrain-models' decoder (GPT).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from plugtrain.builtin.models import MLP
from plugtrain.train.observability.throughput import Throughput, token_counter, tokens_in
from plugtrain.train.trainer import Trainer, default_loss


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """One torch thread: the models are tiny and the machine's two cores are shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _records(model_dir: Path) -> list[dict[str, Any]]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _counted(run: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return int(counter.get_total_flops())


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05)


def test_mlp_flops_equal_flop_counters_and_mfu_uses_the_given_peak(tmp_path: Path) -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(8, 64), torch.randint(0, 10, (8,))) for _ in range(4)]
    model = MLP(in_features=64, out_features=10, hidden=32)
    reference = copy.deepcopy(model)
    throughput = Throughput(peak_flops=1e12)
    trainer = Trainer(
        model=model,
        optimizer=_sgd,
        loop={"max_steps": 4},
        logging={"log_steps": 1},
        model_dir=tmp_path,
        callbacks=[throughput],
    )
    trainer.fit(batches)
    inputs, targets = batches[1]
    expected = _counted(lambda: default_loss(reference(inputs), targets).backward())
    assert expected > 0
    assert throughput.flops_per_step == expected
    assert (throughput.step_tokens, throughput.step_samples) == (0, 8)
    records = [r for r in _records(tmp_path) if r.get("split") == "train"]
    last = records[-1]
    assert "device/tokens_per_sec" not in last  # the MLP's batches hold no tokens
    assert last["device/samples_per_sec"] > 0
    assert last["device/mfu"] == pytest.approx(last["device/flops_per_sec"] / 1e12)
    assert "device/mfu" not in records[0]  # step 1: nothing counted yet


def test_the_default_throughput_is_silent_without_tokens(tmp_path: Path) -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(4, 64), torch.randint(0, 10, (4,))) for _ in range(3)]
    trainer = Trainer(
        model=MLP(in_features=64, out_features=10, hidden=8),
        optimizer=_sgd,
        loop={"max_steps": 3},
        logging={"log_steps": 1},
        model_dir=tmp_path,
    )
    assert isinstance(trainer.callbacks[-1], Throughput)
    trainer.fit(batches)
    assert trainer.callbacks[-1].flops_per_step is None
    assert not any(k.startswith("device/") for r in _records(tmp_path) for k in r)
    removed = Trainer(
        model=MLP(in_features=64, out_features=10, hidden=8),
        model_dir=tmp_path / "other",
        callbacks=[{"Throughput": None}],
    )
    assert not any(isinstance(c, Throughput) for c in removed.callbacks)


def test_decoder_flops_equal_flop_counters_with_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plugtrain.train.observability.peak_flops import cpu_peak_flops
    from plugtrain_models.gpt import GPT

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cpu_peak_flops.cache_clear()  # probe again, into this test's cache folder
    torch.manual_seed(0)
    model = GPT(vocab_size=50, n_layer=2, n_head=2, n_embd=16, block_size=8)
    reference = copy.deepcopy(model)
    batches = []
    for _ in range(8):
        ids = torch.randint(0, 50, (2, 8))
        batches.append({"input_ids": ids, "labels": torch.roll(ids, -1, 1)})
    trainer = Trainer(
        model=model,
        optimizer=_sgd,
        loop={"max_steps": 4, "grad_accum_steps": 2},
        logging={"log_steps": 2},
        model_dir=tmp_path / "run",
    )
    throughput = trainer.callbacks[-1]
    assert isinstance(throughput, Throughput)  # on by default: the decoder counts tokens
    trainer.fit(batches)

    def step_two() -> None:  # the counted step: micro-batches 3 and 4
        for batch in batches[2:4]:
            reference(batch)["loss"].backward()

    assert throughput.flops_per_step == _counted(step_two)
    assert (throughput.step_tokens, throughput.step_samples) == (32, 4)
    last = _records(tmp_path / "run")[-1]
    assert last["device/tokens_per_sec"] == pytest.approx(8 * last["device/samples_per_sec"])
    assert 0 < last["device/mfu"] < 1.5  # the CPU's probed matmul peak
    assert (tmp_path / "cache" / "plugtrain" / "peak_flops.json").is_file()


def test_token_counts() -> None:
    ids = torch.zeros(3, 5, dtype=torch.long)
    assert tokens_in({"input_ids": ids}) == 15
    assert tokens_in((ids, ids)) == 0
    assert token_counter(MLP(in_features=4, out_features=2)) is tokens_in


def test_a_counted_step_that_skips_its_update_stops_counting_at_the_end(tmp_path: Path) -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    torch.manual_seed(0)
    batches = [(torch.randn(4, 64), torch.randint(0, 10, (4,))) for _ in range(2)]
    batches[1][0][0, 0] = float("nan")  # step 2, the counted one: no optimizer step
    throughput = Throughput(peak_flops=1e12)
    trainer = Trainer(
        model=MLP(in_features=64, out_features=10, hidden=8),
        optimizer=_sgd,
        loop={"max_steps": 2, "nan_policy": "skip_step"},
        logging={"log_steps": 1},
        model_dir=tmp_path,
        callbacks=[throughput],
    )
    trainer.fit(batches)
    assert _get_current_dispatch_mode() is None
    assert throughput.flops_per_step is not None
    assert throughput.flops_per_step > 0
