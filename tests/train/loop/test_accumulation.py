"""``loop.loss_averaging``: an accumulated step's gradient is the one-big-batch gradient.

The model scores masked tokens and reports their count (``num_examples``); the micro-batches
differ in size and in token count. ``global`` must give the gradient of one batch of all of
them, on one process and on two real gloo processes started by ``plugtrain fit``;
``per_micro_batch`` keeps the mean of the micro-batches' means.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from support.plugtrain_cli import run_plugtrain

from plugtrain.config import check_run, load_yaml
from plugtrain.errors import ConfigError
from plugtrain.train.loop.accumulation import StepLoss
from plugtrain.train.trainer import Trainer

PLUGIN = '''\
"""Test double: a masked-token model, its data, and an SGD that saves the step's gradients."""

import os

import attrs
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import plugtrain
from plugtrain import hookimpl
from plugtrain.schema import arg


class TokenModel(nn.Module):
    """Squared error over the unmasked tokens; ``num_examples`` is their count."""

    def __init__(self, features=5):
        super().__init__()
        self.proj = nn.Linear(features, 4)
        self.out = nn.Linear(4, 1)

    def forward(self, batch):
        x, y, mask = batch
        error = (self.out(torch.tanh(self.proj(x))).squeeze(-1) - y) ** 2 * mask
        tokens = int(mask.sum())
        return {"loss": error.sum() / tokens, "num_examples": tokens}


def token_tensors(num_examples=20, features=5, length=6):
    """Inputs, targets and masks keeping 1 to ``length`` tokens of each example."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(num_examples, length, features, generator=generator)
    y = torch.randn(num_examples, length, generator=generator)
    kept = torch.randint(1, length + 1, (num_examples, 1), generator=generator)
    mask = (torch.arange(length) < kept).float()
    return x, y, mask


def token_loader(batch_size, num_examples=20):
    """The examples in order, ``batch_size`` at a time (the last batch may be smaller)."""
    dataset = TensorDataset(*token_tensors(num_examples))
    return DataLoader(dataset, batch_size=batch_size, shuffle=False)


@attrs.frozen
class TokenModelArgs:
    """A masked-token model."""

    features: int = arg(5, help="input features")


@attrs.frozen
class TokenDataArgs:
    """Masked-token examples."""

    batch_size: int = arg(help="examples per batch")
    num_examples: int = arg(20, help="examples")


@attrs.frozen
class GradSGDArgs:
    """SGD that saves the gradients it steps with."""

    lr: float = arg(help="learning rate")


def grad_sgd(params, lr):
    optimizer = plugtrain.resolve("optimizer", "SGD")(params, lr=lr)
    step = optimizer.step
    count = [0]

    def recorded_step(*args, **kwargs):
        count[0] += 1
        params = [p for g in optimizer.param_groups for p in g["params"]]
        grads = [p.grad.clone() for p in params]
        saved = {"grads": grads, "weights": [p.detach().clone() for p in params]}
        name = f"rank{os.environ.get('RANK', 'alone')}_grads{count[0]}.pt"
        torch.save(saved, os.path.join(os.environ["RECORD_DIR"], name))
        return step(*args, **kwargs)

    optimizer.step = recorded_step
    return optimizer


@hookimpl
def plugtrain_register_models(registry):
    registry.register("TokenModel", "tokens:TokenModel", schema=TokenModelArgs)


@hookimpl
def plugtrain_register_dataloaders(registry):
    registry.register("TokenData", "tokens:token_loader", schema=TokenDataArgs)


@hookimpl
def plugtrain_register_optimizers(registry):
    registry.register("GradSGD", "tokens:grad_sgd", schema=GradSGDArgs)
'''


@pytest.fixture
def tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The plugin module above, importable as ``tokens``."""
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / "tokens.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("tokens", None)
    import tokens as module

    yield module
    sys.modules.pop("tokens", None)


pytestmark = pytest.mark.usefixtures("fresh_backend")


def _big_batch(tokens: Any, model: torch.nn.Module) -> tuple[list[torch.Tensor], float]:
    """The gradient and loss of one batch of all 20 examples."""
    model.zero_grad()
    loss = model(tokens.token_tensors())["loss"]
    loss.backward()
    return [p.grad.clone() for p in model.parameters()], float(loss.detach())


def _mean_of_means(tokens: Any, model: torch.nn.Module, size: int) -> list[torch.Tensor]:
    """Today's accumulation: each micro-batch's mean loss divided by their number."""
    model.zero_grad()
    batches = list(tokens.token_loader(size))
    for batch in batches:
        (model(batch)["loss"] / len(batches)).backward()
    return [p.grad.clone() for p in model.parameters()]


def _relative_error(mine: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    difference = sum(float((a - b).pow(2).sum()) for a, b in zip(mine, expected, strict=True))
    norm = sum(float(b.pow(2).sum()) for b in expected)
    return (difference / norm) ** 0.5


class _Grab:
    """Saves the gradients the optimizer is about to step with."""

    def __init__(self) -> None:
        self.grads: list[list[torch.Tensor]] = []

    def on_before_optimizer_step(self, trainer: Any, optimizer: Any) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.grads.append([p.grad.clone() for p in params])


def _fit_one_process(tmp_path: Path, tokens: Any, averaging: str) -> tuple[_Grab, Any]:
    torch.manual_seed(2)
    model = tokens.TokenModel()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    grab = _Grab()
    trainer = Trainer(
        device="CPU",
        model_dir=tmp_path / averaging,
        model=model,
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        loop={
            "max_steps": 1,
            "grad_accum_steps": 4,
            "loss_averaging": averaging,
            "sample_order": "loader",  # its own uneven last batch
        },
        logging={"log_steps": 1, "progress": False},
        checkpoint={"autoload_last_checkpoint": False},
        callbacks=[grab],
    )
    trainer.fit(tokens.token_loader(6))  # micro-batches of 6, 6, 6 and 2 examples
    reference = tokens.TokenModel()
    reference.load_state_dict(start)
    return grab, reference


def _train_loss(model_dir: Path) -> float:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    [record] = [r for r in map(json.loads, lines) if r["split"] == "train"]
    return float(record["loss"])


def test_global_averaging_gives_the_one_big_batch_gradient_on_one_process(tmp_path, tokens):
    grab, reference = _fit_one_process(tmp_path, tokens, "global")
    expected, loss = _big_batch(tokens, reference)
    assert _relative_error(grab.grads[0], expected) < 1e-6
    assert _train_loss(tmp_path / "global") == pytest.approx(loss, rel=1e-6)
    # the data is uneven enough that the mean of means is far from it
    assert _relative_error(_mean_of_means(tokens, reference, 6), expected) > 0.05


def test_per_micro_batch_averaging_keeps_the_mean_of_the_means(tmp_path, tokens):
    grab, reference = _fit_one_process(tmp_path, tokens, "per_micro_batch")
    expected = _mean_of_means(tokens, reference, 6)
    assert _relative_error(grab.grads[0], expected) < 1e-6
    with torch.no_grad():
        means = [float(reference(b)["loss"]) for b in tokens.token_loader(6)]
    assert _train_loss(tmp_path / "per_micro_batch") == pytest.approx(sum(means) / 4, rel=1e-6)


class _Strategy:
    """Two processes seen from one: the other one counted ``others`` examples."""

    world_size = 2

    def __init__(self, others: float) -> None:
        self.others = others

    def reduce_sums(self, sums: dict[str, float]) -> dict[str, float]:
        return {k: v + self.others for k, v in sums.items()}


def test_global_step_loss_scales_gradients_by_world_size_over_all_examples():
    step = StepLoss("global", 2, world_size=2)
    loss = torch.tensor(3.0, requires_grad=True)
    assert float(step.to_backward(loss, 4).detach()) == 12.0
    step.add(loss, 4)
    step.add(torch.tensor(1.0), 2)
    grad = torch.full((3,), 6.0)
    share = step.finish(_Strategy(others=10.0), [grad])
    assert torch.equal(grad, torch.full((3,), 6.0 * 2 / 16))  # 16 examples over both
    assert share == pytest.approx((12.0 + 2.0) * 2 / 16)
    plain = StepLoss("global", 1, world_size=1)
    assert plain.to_backward(loss, 4) is loss
    with pytest.raises(ValueError, match="loss_averaging"):
        StepLoss("mean", 1, 1)


def test_loss_averaging_is_checked_with_its_position(installed_registry):
    text = textwrap.dedent(
        """\
        trainer:
          init:
            device: CPU
            model: {MLP: {in_features: 64, out_features: 10}}
            optimizer: {SGD: {lr: 0.1}}
            loop: {max_steps: 10, loss_averaging: tokens}
          fit:
            train_dataloader: {Synthetic: {batch_size: 8}}
        """
    )
    if "SGD" not in installed_registry.names("optimizer"):
        pytest.skip("plugtrain-optimizers is not installed")
    with pytest.raises(ConfigError) as info:
        check_run(load_yaml(text.encode(), "run.yaml"), installed_registry, "run.yaml")
    [issue] = info.value.issues
    assert issue.path == "trainer.init.loop.loss_averaging"
    assert issue.location == "run.yaml:6:43"
    assert "global" in issue.message
    assert "per_micro_batch" in issue.message


RUN = """\
plugins: [tokens]
trainer:
  init:
    backend: {{backend_type: CPU, num_processes: 2, dist_timeout: 30}}
    model_dir: {model_dir}
    seed: 2
    model: {{TokenModel: {{}}}}
    optimizer: {{GradSGD: {{lr: 0.1}}}}
    loop: {{max_steps: 1, grad_accum_steps: 4, sample_order: loader}}
    logging: {{log_steps: 1}}
  fit:
    train_dataloader: {{TokenData: {{batch_size: 3}}}}
"""


@pytest.mark.slow
def test_two_gloo_processes_accumulate_the_one_big_batch_gradient(tmp_path, tokens):
    """Each rank takes every other example (10): micro-batches of 3, 3, 3 and 1 examples."""
    records = tmp_path / "records"
    records.mkdir()
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model_dir=tmp_path / "model"))
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    environ["RECORD_DIR"] = str(records)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(tmp_path / "plugin"), environ.get("PYTHONPATH", "")]
    )
    done = run_plugtrain("fit", str(run), cwd=tmp_path, env=environ, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = [torch.load(records / f"rank{rank}_grads1.pt") for rank in range(2)]
    reference = tokens.TokenModel()
    # the optimizer's order (weight decay groups) is not the model's; the shapes all differ
    by_shape = {tuple(p.shape): p for p in reference.parameters()}
    order = [by_shape[tuple(w.shape)] for w in saved[0]["weights"]]
    with torch.no_grad():
        for param, weight in zip(order, saved[0]["weights"], strict=True):
            param.copy_(weight)
    grads, loss = _big_batch(tokens, reference)
    position = {id(p): i for i, p in enumerate(reference.parameters())}
    expected = [grads[position[id(p)]] for p in order]
    for rank in range(2):
        error = _relative_error(saved[rank]["grads"], expected)
        assert error < 1e-6, f"rank {rank}: relative error {error}"
    assert _train_loss(tmp_path / "model") == pytest.approx(loss, rel=1e-6)
