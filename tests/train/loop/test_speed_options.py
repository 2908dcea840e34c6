"""The speed options of ``trainer.init``: the profiler window, activation checkpointing, compile.

The profiler writes a loadable Chrome trace of exactly the asked steps; activation checkpointing
(full and selective) gives the gradients and the 20-step losses of the run without it; regional
compile gives eager's losses within 1e-5 (one compiled run, of a tiny 2-layer decoder: compiling
is slow on two cores).
"""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from plugtrain.config import check_run, load_yaml
from plugtrain.errors import ConfigError
from plugtrain.train.assembly.trainers import build_trainer
from plugtrain.train.loop.model_preparation import prepare_model, repeated_blocks
from plugtrain.train.trainer import Trainer

RUN = """\
trainer:
  init:
    device: CPU
    seed: 1
    model_dir: {model_dir}
    model:
      MLP: {{in_features: 64, out_features: 10, hidden: 16}}
    optimizer:
      SGD: {{lr: 0.1}}
    loop: {{max_steps: 5}}
    logging: {{log_steps: 1}}
{extra}
  fit:
    train_dataloader: {{Synthetic: {{batch_size: 8}}}}
"""


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """One torch thread: the models are tiny and the machine's two cores are shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _plan(registry: Any, model_dir: Path, extra: str) -> Any:
    text = RUN.format(model_dir=model_dir, extra=textwrap.indent(extra, "    ").rstrip())
    return check_run(load_yaml(text.encode(), "run.yaml"), registry, "run.yaml")[0]


def test_the_options_are_checked_with_their_positions(installed_registry: Any, tmp_path: Path):
    extra = "compile: regionl\nactivation_checkpointing: ful\nprofile: {start_step: 0}"
    with pytest.raises(ConfigError) as info:
        _plan(installed_registry, tmp_path, extra)
    issues = {issue.path: issue for issue in info.value.issues}
    assert issues["trainer.init.compile"].location == "run.yaml:12:14"
    assert "regional" in issues["trainer.init.compile"].message
    assert "selective" in issues["trainer.init.activation_checkpointing"].message
    start = issues["trainer.init.profile.start_step"]
    assert (start.location, start.message) == ("run.yaml:14:27", "must be > 0, got 0")


def test_the_profiler_traces_exactly_the_asked_steps(installed_registry: Any, tmp_path: Path):
    extra = "profile: {start_step: 3, steps: 2, memory: true}"
    plan = _plan(installed_registry, tmp_path, extra)
    assert (plan.profile.start_step, plan.profile.steps, plan.profile.memory) == (3, 2, True)
    trainer = build_trainer(plan, installed_registry, {})
    torch.manual_seed(0)
    trainer.fit([(torch.randn(8, 64), torch.randint(0, 10, (8,))) for _ in range(5)])
    (trace,) = (tmp_path / "profile").iterdir()
    assert trace.name == "trace_steps_3-4.json"
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name", "") for e in events}
    assert {n for n in names if n.startswith("train_step ")} == {"train_step 3", "train_step 4"}
    assert len({n for n in names if n.startswith("ProfilerStep#")}) == 2
    assert any(n == "aten::addmm" for n in names)  # the model's work is in it
    assert any(n == "[memory]" for n in names)  # profile_memory's allocation events


def test_no_profile_adds_nothing(tmp_path: Path) -> None:
    from plugtrain.builtin.models import MLP
    from plugtrain.train.observability.profiling import ProfilerWindow

    trainer = Trainer(model=MLP(in_features=4, out_features=2), model_dir=tmp_path)
    assert not any(isinstance(c, ProfilerWindow) for c in trainer.callbacks)


def _decoder() -> Any:
    from plugtrain_models.gpt import GPT

    torch.manual_seed(0)
    return GPT(vocab_size=64, n_layer=2, n_head=2, n_embd=32, block_size=16)


def _batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(20):
        ids = torch.randint(0, 64, (4, 16), generator=generator)
        batches.append({"input_ids": ids, "labels": torch.roll(ids, -1, 1)})
    return batches


def _losses(tmp_path: Path, name: str, **options: Any) -> list[float]:
    """The 20 training losses; the run's model FLOPs per step in ``FLOPS[name]``."""
    trainer = Trainer(
        model=_decoder,
        optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=1e-2),
        loop={"max_steps": 20},
        logging={"log_steps": 1},
        model_dir=tmp_path / name,
        seed=0,
        **options,
    )
    trainer.fit(_batches())
    FLOPS[name] = trainer.callbacks[-1].flops_per_step
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r.get("split") == "train"]


FLOPS: dict[str, int | None] = {}


@pytest.fixture(scope="module")
def eager_losses(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    return _losses(tmp_path_factory.mktemp("eager"), "eager")


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_activation_checkpointing_keeps_gradients_and_losses(
    mode: str, eager_losses: list[float], tmp_path: Path
) -> None:
    plain = _decoder()
    checkpointed = prepare_model(copy.deepcopy(plain), activation_checkpointing=mode)
    batch = _batches()[0]
    for model in (plain, checkpointed):
        model(batch)["loss"].backward()
    for (name, a), (_, b) in zip(
        plain.named_parameters(), checkpointed.named_parameters(), strict=True
    ):
        assert a.grad is not None
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-6, msg=name)
    assert _losses(tmp_path, mode, activation_checkpointing=mode) == pytest.approx(
        eager_losses, abs=1e-6
    )


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.slow
def test_regional_compile_matches_eager(eager_losses: list[float], tmp_path: Path) -> None:
    from torch._dynamo.utils import counters

    assert len(eager_losses) == 20
    counters.clear()
    compiled = _losses(tmp_path, "regional", compile="regional")
    assert counters["stats"]["unique_graphs"] >= 1  # the blocks ran compiled
    assert compiled == pytest.approx(eager_losses, abs=1e-5)
    assert FLOPS["regional"] == FLOPS["eager"] > 0  # Throughput counts the compiled model too


def test_blocks_are_declared_or_found() -> None:
    from plugtrain.builtin.models import MLP

    decoder = _decoder()
    assert repeated_blocks(decoder) == list(decoder.model.transformer_decoder.layers)
    stack = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(3)]))
    assert len(repeated_blocks(stack)) == 3
    with pytest.raises(ConfigError, match="declares none"):
        prepare_model(MLP(in_features=4, out_features=2), compile="regional")
