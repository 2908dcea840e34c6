"""The core's sparsity machinery (plugtrain.train.loop.sparsity) with an algorithm written here.

The algorithm below meets only the documented protocol, so these tests check what the core
does for any algorithm: parameter selection, mask buffers, masking of weights, gradients and
optimizer state, update steps (skipped steps, gradient accumulation), checkpoints and the
resume errors. The built-in algorithms are tested in plugins/sparsity/tests.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch import nn

from plugtrain.errors import CheckpointMismatchError
from plugtrain.protocols import SparsityAlgorithm
from plugtrain.train.loop.sparsity import (
    Sparsity,
    SparsityGroup,
    default_param_filter,
    glob_filter,
    select_parameters,
)
from plugtrain.train.trainer import Trainer


class Shuffle:
    """Keeps ``keep`` random weights of each parameter; new random ones every ``freq`` steps."""

    def __init__(self, params, keep=4, freq=1, needs_gradients=False):
        self.params = list(params)
        self.keep = keep
        self.freq = freq
        self.needs_gradients = needs_gradients
        self.step = 0
        self.calls: list[Any] = []

    def _random(self, param, generator):
        score = torch.rand(param.shape, generator=generator)
        mask = torch.zeros(param.numel(), dtype=torch.bool)
        mask[torch.topk(score.flatten(), self.keep).indices] = True
        return mask.reshape(param.shape)

    def initial_masks(self, generator):
        self.calls.append("init")
        return {name: self._random(p, generator) for name, p in self.params}

    def advance(self, stepped):
        self.step += 1
        self.calls.append(("advance", stepped))
        return stepped and self.step % self.freq == 0

    def update_masks(self, masks, gradients, generator):
        self.calls.append(("update", None if gradients is None else dict(gradients)))
        return {name: self._random(p, generator) for name, p in self.params}

    def target_sparsity(self):
        return 1 - self.keep / self.params[0][1].numel()

    def state_dict(self):
        return {"step": torch.tensor(self.step)}

    def load_state_dict(self, state):
        self.step = int(state["step"])


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3))


def _batches(count: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(8, 4, generator=generator), torch.randint(0, 3, (8,), generator=generator))
        for _ in range(count)
    ]


def _trainer(model_dir, *, algorithms=None, **kwargs: Any) -> Trainer:
    made: list[Shuffle] = [] if algorithms is None else algorithms
    options = kwargs.pop("shuffle", {})

    def build(params):
        made.append(Shuffle(params, **options))
        return made[-1]

    settings: dict[str, Any] = {
        "model_dir": model_dir,
        "model": _model,
        "optimizer": lambda m: torch.optim.Adam(m.parameters(), lr=0.05),
        "loop": {"max_steps": 6},
        "logging": {"log_steps": 1},
        "seed": 0,
        "sparsity": [SparsityGroup(build)],
    }
    settings.update(kwargs)
    return Trainer(**settings)


class _Checks:
    """After every step: weights, gradients and optimizer state are zero where masked."""

    def __init__(self) -> None:
        self.steps = 0
        self.grads_checked = 0

    def on_before_optimizer_step(self, trainer, optimizer):
        for sparse in trainer.sparsity.parameters:
            grad = sparse.param.grad
            assert grad is not None
            assert torch.count_nonzero(grad[~sparse.mask]) == 0, sparse.name
            self.grads_checked += 1

    def on_train_step_end(self, trainer, metrics):
        self.steps += 1
        for sparse in trainer.sparsity.parameters:
            pruned = ~sparse.mask
            assert torch.count_nonzero(sparse.param[pruned]) == 0, sparse.name
            for value in trainer.optimizer.state[sparse.param].values():
                if value.shape == sparse.param.shape:
                    assert torch.count_nonzero(value[pruned]) == 0, sparse.name
            assert int(sparse.mask.sum()) == 4


def test_the_algorithm_meets_the_protocol():
    assert isinstance(Shuffle([("w", torch.zeros(2, 2))]), SparsityAlgorithm)


def test_default_filter_and_globs():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(5, 4)
            self.proj_q_dense_layer = nn.Linear(4, 4)
            self.proj_k_dense_layer = nn.Linear(4, 4)
            self.layer_norm = nn.LayerNorm(4)
            self.lm_head = nn.Linear(4, 5)

    net = Net()
    [found] = select_parameters(net, [default_param_filter])
    assert [name for name, _, _ in found] == [
        "proj_q_dense_layer.weight",
        "proj_k_dense_layer.weight",
    ]
    # *  matches dots, [qk] classes work, whole names only; the first matching group wins
    first, second = select_parameters(
        net, [glob_filter("*proj_[q]_dense_layer.*"), glob_filter(["*.weight"])]
    )
    assert [n for n, _, _ in first] == ["proj_q_dense_layer.weight", "proj_q_dense_layer.bias"]
    assert [n for n, _, _ in second] == [
        "embedding.weight",
        "proj_k_dense_layer.weight",
        "layer_norm.weight",
        "lm_head.weight",
    ]
    assert select_parameters(net, [glob_filter("weight")]) == [[]]
    with pytest.raises(TypeError, match="filter must be a string or list of strings, got int"):
        glob_filter(3)  # type: ignore[arg-type]


def test_tied_weights_are_sparsified_once_and_requires_dense_is_skipped():
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    net[1].weight = net[0].weight
    net[2].requires_dense = True
    [found] = select_parameters(net, [default_param_filter])
    assert [n for n, _, _ in found] == ["0.weight"]


def test_masks_are_persistent_buffers_and_every_step_keeps_zeros_where_masked(tmp_path):
    checks = _Checks()
    made: list[Shuffle] = []
    trainer = _trainer(tmp_path, algorithms=made, callbacks=[checks])
    trainer.fit(_batches(6))
    assert checks.steps == 6
    assert checks.grads_checked == 12
    state = trainer.model.state_dict()
    assert state["0.weight_mask"].dtype == torch.bool
    assert state["2.weight_mask"].shape == (3, 6)
    assert "0.bias_mask" not in state
    [algorithm] = made
    assert algorithm.calls[0] == "init"
    assert algorithm.calls.count("init") == 1
    assert [c for c in algorithm.calls if c[0] == "advance"] == [("advance", True)] * 6
    saved = torch.load(tmp_path / "checkpoint_6.mdl", weights_only=True)
    assert saved["sparsity"] == [{"step": torch.tensor(6)}]
    assert torch.equal(saved["model"]["0.weight_mask"], state["0.weight_mask"])


def test_gradient_accumulation_sums_the_unmasked_gradients(tmp_path):
    made: list[Shuffle] = []
    trainer = _trainer(
        tmp_path,
        algorithms=made,
        shuffle={"needs_gradients": True, "freq": 2},
        loop={"max_steps": 2, "grad_accum_steps": 2},
        optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.0),
    )
    seen: dict[str, torch.Tensor] = {}

    class Grab:
        def on_before_optimizer_step(self, t, optimizer):
            if t.global_step == 1:
                seen.update({p.name: p.param.detach().clone() for p in t.sparsity.parameters})
                seen.update({p.name + "_mask": p.mask.clone() for p in t.sparsity.parameters})

    trainer.callbacks.append(Grab())
    trainer.callbacks_dispatch = type(trainer.callbacks_dispatch)(trainer.callbacks)
    batches = _batches(4)
    trainer.fit(batches)
    [algorithm] = made
    updates = [c for c in algorithm.calls if c[0] == "update"]
    assert len(updates) == 1  # step 2 only (freq 2), with the gradients of its two micro-batches
    gradients = updates[0][1]
    # lr 0: the weights stay as they were; the dense gradient of step 2 by hand
    model = _model()
    state = {k: v for k, v in trainer.model.state_dict().items() if not k.endswith("_mask")}
    model.load_state_dict(state)
    with torch.no_grad():
        model[0].weight.copy_(seen["0.weight"])
        model[2].weight.copy_(seen["2.weight"])
    expected = {"0.weight": torch.zeros(6, 4), "2.weight": torch.zeros(3, 6)}
    for inputs, targets in batches[2:]:
        model.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets) / 2
        loss.backward()
        expected["0.weight"] += model[0].weight.grad
        expected["2.weight"] += model[2].weight.grad
    for name, value in expected.items():
        torch.testing.assert_close(gradients[name], value, rtol=1e-5, atol=1e-7)
        # the unmasked gradient is non-zero where the weight is masked
        assert torch.count_nonzero(gradients[name][~seen[name + "_mask"]]) > 0


def test_bf16_autocast_keeps_masked_weights_zero(tmp_path):
    checks = _Checks()
    trainer = _trainer(tmp_path, callbacks=[checks], precision={"fp16_type": "bfloat16"})
    trainer.fit(_batches(6))
    assert checks.steps == 6


def test_a_step_the_grad_scaler_skips_is_no_update_step(tmp_path):
    made: list[Shuffle] = []
    trainer = _trainer(
        tmp_path,
        algorithms=made,
        loop={"max_steps": 2},
        precision={
            "fp16_type": "float16",
            "loss_scaling_factor": "dynamic",
            "initial_loss_scale": 1e38,
        },
    )
    before = None

    class Masks:
        def on_train_step_start(self, t, step):
            nonlocal before
            if step == 1:
                before = {p.name: p.mask.clone() for p in t.sparsity.parameters}

    trainer.callbacks.append(Masks())
    trainer.callbacks_dispatch = type(trainer.callbacks_dispatch)(trainer.callbacks)
    trainer.fit(_batches(2))
    [algorithm] = made
    advances = [c for c in algorithm.calls if c[0] == "advance"]
    assert advances[0] == ("advance", False)  # the scale overflowed float16: skipped
    assert len([c for c in algorithm.calls if c[0] == "update"]) == sum(s for _, s in advances)
    assert algorithm.step == 2


def test_validate_only_masks_before_forward(tmp_path):
    trainer = _trainer(tmp_path, optimizer=None)
    trainer.validate(_batches(1), ckpt_path=None)
    for sparse in trainer.sparsity.parameters:
        assert torch.count_nonzero(sparse.param[~sparse.mask]) == 0
        assert int(sparse.mask.sum()) == 4


def test_resume_is_bit_exact_with_random_regrowth(tmp_path):
    straight = _trainer(tmp_path / "a", shuffle={"freq": 2})
    straight.fit(_batches(6))
    first = _trainer(tmp_path / "b", shuffle={"freq": 2}, loop={"max_steps": 3})
    first.fit(_batches(6))
    second = _trainer(tmp_path / "b", shuffle={"freq": 2})
    second.fit(_batches(6))
    assert second.global_step == 6
    a, b = straight.model.state_dict(), second.model.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert torch.equal(straight.sparsity.generator_state(), second.sparsity.generator_state())


def test_a_dense_checkpoint_is_refused_unless_loading_is_not_strict(tmp_path, caplog):
    dense = Trainer(
        model_dir=tmp_path / "dense",
        model=_model,
        optimizer=lambda m: torch.optim.Adam(m.parameters(), lr=0.05),
        loop={"max_steps": 1},
        seed=0,
    )
    dense.fit(_batches(1))
    path = tmp_path / "dense" / "checkpoint_1.mdl"
    sparse = _trainer(tmp_path / "s")
    with pytest.raises(CheckpointMismatchError) as info:
        sparse.fit(_batches(6), ckpt_path=path)
    assert str(info.value) == (
        f"{path}: Did not find any sparsity masks in the model checkpoint. Please ensure that "
        "you're using a checkpoint with the correct sparsity config from a previous run."
    )
    made: list[Shuffle] = []
    lenient = _trainer(
        tmp_path / "l",
        algorithms=made,
        checkpoint={"disable_strict_checkpoint_loading": True},
        loop={"max_steps": 2},
    )
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        lenient.fit(_batches(6), ckpt_path=path)
    assert "Sparsity state not found in the checkpoint. Using default initialized state." in (
        caplog.text
    )
    assert made[0].calls[0] == "init"  # the masks were built at run start


def test_a_checkpoint_of_another_number_of_groups_is_refused(tmp_path, caplog):
    first = _trainer(tmp_path / "one", loop={"max_steps": 1})
    first.fit(_batches(1))
    path = tmp_path / "one" / "checkpoint_1.mdl"

    def two(params):
        return Shuffle(params)

    two_groups = _trainer(
        tmp_path / "two",
        sparsity=[SparsityGroup(two, ["0.weight"]), SparsityGroup(two, ["2.weight"])],
    )
    with pytest.raises(CheckpointMismatchError) as info:
        two_groups.fit(_batches(6), ckpt_path=path)
    assert str(info.value) == (
        f"{path}: sparsity: Expected a list of 2 state_dicts for the Group sparsity algorithm "
        "but got 1."
    )
    made: list[Shuffle] = []
    again = _trainer(tmp_path / "again", algorithms=made, loop={"max_steps": 2})
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        again.fit(_batches(6), ckpt_path=path)
    assert "Sparsity state found in checkpoint and loaded successfully." in caplog.text
    assert "init" not in made[0].calls  # the masks came from the checkpoint
    assert made[0].step == 2


def test_a_wrong_mask_names_the_algorithm(tmp_path):
    class Bad(Shuffle):
        def initial_masks(self, generator):
            return {name: torch.ones(2, dtype=torch.bool) for name, _ in self.params}

    trainer = _trainer(tmp_path, sparsity=[SparsityGroup(Bad, None, "sparsity[0]")])
    with pytest.raises(ValueError, match=r"sparsity\[0\]: Bad.initial_masks returned a mask of "):
        trainer.fit(_batches(6))


def test_a_second_optimizer_is_refused(tmp_path):
    trainer = _trainer(tmp_path)
    with pytest.raises(RuntimeError, match="Sparsifying multiple optimizers"):
        trainer.sparsity.attach_optimizer(torch.optim.SGD(trainer.model.parameters(), lr=0.1))


def test_gradients_are_zero_where_masked_even_when_not_finite():
    layer = nn.Linear(3, 2, bias=False)
    mask = torch.tensor([[True, False, True], [False, True, False]])

    def build(params):
        algorithm = Shuffle(params)
        algorithm.initial_masks = lambda generator: {"weight": mask}
        return algorithm

    sparsity = Sparsity([SparsityGroup(build, ["weight"])], layer)
    sparsity.initialize()
    layer(torch.tensor([[1.0, float("nan"), 2.0]])).sum().backward()
    grad = layer.weight.grad
    assert torch.equal(grad[~mask], torch.zeros(3))  # NaN in column 1 at (0, 1): now 0
    assert torch.isnan(grad[1, 1])  # a kept position keeps its NaN (nan_policy sees it)
    assert torch.equal(grad[0, [0, 2]], torch.tensor([1.0, 2.0]))
    layer.weight.grad = None
    layer(torch.tensor([[1.0, 3.0, 2.0]])).sum().backward()  # finite: the fast product
    assert torch.equal(layer.weight.grad, torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))


def test_a_filter_matching_nothing_warns_and_the_run_resumes(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="plugtrain"):
        first = _trainer(tmp_path, sparsity=[SparsityGroup(Shuffle, ["*attention*"])])
    assert (
        "sparsity: No parameters were sparsified in the module. This is likely due to the "
        "parameter filter not matching any parameters in the module"
    ) in caplog.text
    first.fit(_batches(6), ckpt_path=None)
    assert not [k for k in first.model.state_dict() if k.endswith("_mask")]
    again = _trainer(tmp_path, sparsity=[SparsityGroup(Shuffle, ["*attention*"])])
    again.fit(_batches(6))  # nothing to find in the checkpoint: no masks is right
    assert again.loaded_step == 6


def test_a_replaced_mask_buffer_is_applied(tmp_path):
    trainer = _trainer(tmp_path, optimizer=None)
    trainer.validate(_batches(1), ckpt_path=None)
    first = trainer.sparsity.parameters[0]
    replacement = torch.zeros_like(first.mask)
    replacement[0, 0] = True
    first.module._buffers[first.local + "_mask"] = replacement  # a new tensor, as assign=True
    trainer.validate(_batches(1), ckpt_path=None)
    assert torch.count_nonzero(first.param) <= 1


def test_a_single_mapping_is_a_one_group_state(caplog):
    model = _model()
    made: list[Shuffle] = []
    sparsity = Sparsity([SparsityGroup(lambda p: made.append(Shuffle(p)) or made[-1])], model)
    parts = {"model": model.state_dict(), "sparsity": {"step": torch.tensor(5)}}
    sparsity.check_checkpoint("cs.mdl", parts, strict=True)
    with caplog.at_level(logging.INFO, logger="plugtrain"):
        sparsity.load_checkpoint(parts, None)
    assert made[0].step == 5
    sparsity.initialize()
    assert "init" not in made[0].calls  # the masks were in the model state
