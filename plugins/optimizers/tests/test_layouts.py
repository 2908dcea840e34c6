"""Cache blocks and the flat layout change where the numbers are computed, never the numbers."""

from __future__ import annotations

import io

import pytest
import torch

import plugtrain
from plugtrain.testing import distribution_names
from plugtrain_optimizers import _blocks

# The cstorch-numerics optimizers (Schedule-Free has no flat layout: test_schedule_free.py).
ALL = [
    name
    for name in distribution_names("plugtrain-optimizers", "optimizer")
    if not name.endswith("ScheduleFree")
]
# Every code path of each optimizer (as in test_behaviour.py).
EVERY_FEATURE = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
    "Adam": {"lr": 0.01, "weight_decay": 0.01, "amsgrad": True},
    "AdamW": {"lr": 0.01, "weight_decay": 0.1},
    "Adamax": {"weight_decay": 0.01},
    "Adadelta": {"weight_decay": 0.01},
    "Adagrad": {"lr_decay": 0.01},
    "ASGD": {"t0": 5},
    "NAdam": {"weight_decay": 0.01},
    "RAdam": {"weight_decay": 0.01},
    "RMSprop": {"momentum": 0.5, "centered": True},
    "Rprop": {},
    "Lamb": {"weight_decay": 0.01},
    "Lion": {"weight_decay": 0.1},
    "Adafactor": {"lr": 0.05, "weight_decay": 0.01},
    "Muon": {},
}


@pytest.mark.parametrize("name", ALL)
def test_tiny_cache_blocks_give_the_per_tensor_numbers(train, monkeypatch, name):
    """Blocks of 16 elements cut every tensor of the model (Lamb and Adafactor: several passes)."""
    kwargs = EVERY_FEATURE[name]
    if name == "Muon":
        kwargs = {**kwargs, "ns_dtype": "float32"}
    one, _ = train(name, {**kwargs, "foreach": False})
    monkeypatch.setattr(_blocks, "BLOCK_ELEMENTS", 16)
    blocked, _ = train(name, {**kwargs, "foreach": True})
    for key in one:
        # float64: only the order of the norms' sums differs.
        torch.testing.assert_close(blocked[key], one[key], rtol=1e-9, atol=1e-12, msg=key)


def test_split_blocks_cover_every_element_once():
    tensors = [torch.zeros(40), torch.zeros(3, 4), torch.zeros(5, 9).t(), torch.zeros(7)]
    seen = []
    for (block,), (scalars,) in _blocks.split_blocks([tensors], [[0.0, 1.0, 2.0, 3.0]], 16):
        assert sum(t.numel() for t in block) <= 16 or len(block) == 1
        for t, s in zip(block, scalars, strict=True):
            t.add_(1.0)
            seen.append(s)
    assert all(bool((t == 1).all()) for t in tensors)
    assert seen.count(0.0) == 3  # the 40-element contiguous tensor: 3 slices
    assert seen.count(2.0) == 1  # the transposed one is not contiguous: kept whole


@pytest.mark.parametrize("name", ALL)
def test_flat_layout_gives_the_same_numbers(train, name):
    kwargs = EVERY_FEATURE[name]
    plain, plain_opt = train(name, kwargs, dtype=torch.float32, steps=12)
    flat, flat_opt = train(name, {**kwargs, "flat": True}, dtype=torch.float32, steps=12)
    for key in plain:
        torch.testing.assert_close(flat[key], plain[key], rtol=1e-6, atol=1e-7, msg=key)
    # The saved state has the same format: one tensor per parameter and key, same shapes.
    a, b = plain_opt.state_dict()["state"], flat_opt.state_dict()["state"]
    assert sorted(a) == sorted(b)
    for i in a:
        assert sorted(a[i]) == sorted(b[i])
        for key, value in a[i].items():
            if isinstance(value, torch.Tensor):
                assert b[i][key].shape == value.shape
                assert b[i][key].dtype == value.dtype


def _saved(opt) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("name", ["AdamW", "Lamb", "Rprop", "Adafactor", "NAdam", "Muon"])
@pytest.mark.parametrize("direction", ["flat to plain", "plain to flat"])
def test_checkpoints_load_across_layouts(train, name, direction):
    kwargs = EVERY_FEATURE[name]
    first, second = ({"flat": True}, {}) if direction == "flat to plain" else ({}, {"flat": True})
    straight, _ = train(name, {**kwargs, **first}, dtype=torch.float32, steps=10)
    halfway, opt = train(name, {**kwargs, **first}, dtype=torch.float32, steps=5)
    params = {k: v.clone().requires_grad_() for k, v in halfway.items()}
    resumed_opt = plugtrain.resolve("optimizer", name)(list(params.items()), **kwargs, **second)
    resumed_opt.load_state_dict(torch.load(_saved(opt)))
    if second:  # the loaded state went back into the flat buffers
        layout = resumed_opt._layouts[0]
        state = resumed_opt.state[params["fc1.weight"]]
        tensors = [state[k] for k in state if isinstance(state[k], torch.Tensor)]
        assert all(layout.base_of([t]) is None for t in tensors)
        group = resumed_opt.param_groups[0]["params"]
        for key in ("exp_avg", "prev", "momentum_buffer", "step"):
            if all(key in resumed_opt.state[p] for p in group):
                assert layout.base_of([resumed_opt.state[p][key] for p in group]) is not None
    resumed, _ = train(name, kwargs, steps=5, start=5, params=params, optimizer=resumed_opt)
    for key in straight:
        torch.testing.assert_close(resumed[key], straight[key], rtol=1e-6, atol=1e-7, msg=key)


def test_backward_writes_gradients_into_the_flat_buffer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    opt = plugtrain.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, flat=True)
    ref_opt = plugtrain.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    layout = opt._layouts[0]
    (grads,) = [layout.base_of([p.grad for p in model.parameters()])]
    assert grads is not None
    start, stop = grads.data_ptr(), grads.data_ptr() + grads.numel() * grads.element_size()
    x = torch.randn(16, 5)
    for step in range(6):
        for net, o in ((model, opt), (reference, ref_opt)):
            if step == 3:
                net.zero_grad()  # a module's zero_grad sets .grad to None: repaired at step()
            else:
                o.zero_grad()
            net(x * (1 + step)).pow(2).mean().backward()
        if step != 3:
            assert all(start <= p.grad.data_ptr() < stop for p in model.parameters())
        opt.step()
        ref_opt.step()
        assert all(start <= p.grad.data_ptr() < stop for p in model.parameters())
    for ours, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    # The module's own state_dict is unchanged in form, and loads back in place.
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(saved)
    assert all(start <= p.grad.data_ptr() < stop for p in model.parameters())


@pytest.mark.parametrize("name", ["Adafactor", "Lamb", "Muon", "Rprop", "AdamW"])
def test_same_shaped_parameters_batched_flat_and_per_tensor_agree(name):
    """Several parameters of one shape: stacked (plain), viewed in place (flat), one by one."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(4, 6)] * 5 + [(6,), (3, 2, 6)]
    start = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    grads = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(4)]
    kwargs = {"lr": 0.05} if name == "Rprop" else {"lr": 0.05, "weight_decay": 0.01}
    if name == "Muon":
        kwargs["ns_dtype"] = "float32"
    results = {}
    for label, extra in {
        "per tensor": {"foreach": False},
        "plain": {},
        "flat": {"flat": True},
    }.items():
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = plugtrain.resolve("optimizer", name)(params, **kwargs, **extra)
        for step in grads:
            for p, g in zip(params, step, strict=True):
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)  # flat: the gradient lives in the group's buffer
            opt.step()
        results[label] = [p.detach().clone() for p in params]
    for label in ("plain", "flat"):
        for got, expected in zip(results[label], results["per tensor"], strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12, msg=label)
