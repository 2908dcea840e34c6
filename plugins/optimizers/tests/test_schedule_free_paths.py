"""The Schedule-Free optimizers' multi-tensor and flat paths give their per-tensor loop's bits.

``foreach=False`` is the reference loop (its numbers are checked against the paper's formulas
in ``test_schedule_free.py``); every other path must give exactly the same parameters, ``z``
and second moments, in ``train()`` and in ``eval()`` mode, through warmup, weight decay, a
parameter without a gradient (``flat=True`` gives every parameter a zero gradient instead, by
definition: compared where all have one) and a resume from ``state_dict()`` into another path.
Sizes are odd, so that some elements fall outside whole SIMD vectors in either layout.

These are torch's paths: the one-pass C kernels are off here. Their square root is correctly
rounded where torch's float32 one (MKL's) is not always, so they are held to the optimizer
tests' float32 bound instead (``test_native.py``).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch

import plugtrain
from plugtrain_optimizers import _blocks

pytestmark = pytest.mark.usefixtures("native_kernels_off")

SHAPES = [(7, 13), (5,), (3, 4, 5), (31,), (9, 9), (1, 17), (6, 11), (2,), (12, 3)]
NO_GRAD = 3  # a parameter that never gets a gradient: never stepped, still moved by eval()
CASES = {
    "AdamWScheduleFree": (
        "AdamWScheduleFree",
        {"lr": 0.05, "betas": (0.9, 0.99), "weight_decay": 0.01, "warmup_steps": 3, "r": 0.5},
    ),
    # without weight decay y and z take the normalized gradient in one addcdiv each
    "AdamWScheduleFree-no-decay": ("AdamWScheduleFree", {"lr": 0.05, "warmup_steps": 3}),
    "SGDScheduleFree": (
        "SGDScheduleFree",
        {"lr": 0.05, "momentum": 0.8, "weight_decay": 0.01, "warmup_steps": 3},
    ),
    "SGDScheduleFree-no-decay": ("SGDScheduleFree", {"lr": 0.05, "momentum": 0.8}),
}
PATHS = {
    "foreach": {"foreach": True, "flat": False},
    "flat": {"flat": True},
    "default": {},
}


def _params(dtype: torch.dtype) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=dtype)) for s in SHAPES]


def _grads(params: list[torch.nn.Parameter], step: int, *, all_grads: bool) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        if all_grads or i != NO_GRAD:  # a gradient depending on the point, as backward's would
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.grad = 0.5 * p.detach() + noise


def _snapshot(optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter]) -> dict:
    found: dict[str, torch.Tensor] = {}
    for i, p in enumerate(params):
        found[f"p{i}"] = p.detach().clone()
        for key, value in optimizer.state[p].items():
            if isinstance(value, torch.Tensor):
                found[f"{key}{i}"] = value.clone()
    return found


def _run(
    case: str, path: dict[str, Any], dtype: torch.dtype, resume_into: dict | None = None
) -> list[dict]:
    """Snapshots after 4 steps (train), in eval(), and after 3 more steps (train)."""
    all_grads = path.get("flat") is True or (resume_into or {}).get("flat") is True
    params = _params(dtype)
    name, args = CASES[case]
    cls = plugtrain.resolve("optimizer", name)
    optimizer = cls(params, **args, **path)
    optimizer.train()
    snapshots = []
    for step in range(4):
        _grads(params, step, all_grads=all_grads)
        optimizer.step()
    snapshots.append(_snapshot(optimizer, params))
    optimizer.eval()
    snapshots.append(_snapshot(optimizer, params))
    if resume_into is not None:  # as a checkpoint: saved in eval(), loaded by another path
        buffer = io.BytesIO()
        torch.save(optimizer.state_dict(), buffer)
        buffer.seek(0)
        moved = [torch.nn.Parameter(p.detach().clone()) for p in params]
        optimizer, params = cls(moved, **args, **resume_into), moved
        optimizer.load_state_dict(torch.load(buffer, weights_only=True))
    optimizer.train()
    for step in range(4, 7):
        _grads(params, step, all_grads=all_grads)
        optimizer.step()
    snapshots.append(_snapshot(optimizer, params))
    return snapshots


def _assert_same_bits(got: list[dict], want: list[dict]) -> None:
    for stage, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (
                f"stage {stage}, {key}: {(a[key] - b[key]).abs().max()}"
            )


@pytest.fixture(scope="module")
def reference() -> dict[tuple[str, torch.dtype], list[dict]]:
    """The per-tensor loop's snapshots of each optimizer, dtype and ``flat=True`` or not."""
    return {
        (case, dtype, flat): _run(case, {"foreach": False, "flat": flat}, dtype)
        for case in CASES
        for dtype in (torch.float32, torch.float64)
        for flat in (True, False)
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_path_gives_the_per_tensor_bits(reference, case, path, dtype):
    flat = PATHS[path].get("flat") is True
    _assert_same_bits(_run(case, PATHS[path], dtype), reference[case, dtype, flat])


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_cache_blocks_give_the_per_tensor_bits(reference, monkeypatch, case):
    """Blocks of 16 elements cut most tensors (a block always ends inside a SIMD vector)."""
    monkeypatch.setattr(_blocks, "BLOCK_ELEMENTS", 16)
    for path in PATHS.values():
        flat = path.get("flat") is True
        _assert_same_bits(_run(case, path, torch.float32), reference[case, torch.float32, flat])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_resume_across_paths_gives_the_per_tensor_bits(reference, case):
    want = reference[case, torch.float32, True]
    _assert_same_bits(_run(case, {"flat": True}, torch.float32, {"foreach": False}), want)
    _assert_same_bits(_run(case, {"foreach": False}, torch.float32, {"flat": True}), want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_default_path_flattens_many_small_tensors(case):
    name, args = CASES[case]
    optimizer = plugtrain.resolve("optimizer", name)(_params(torch.float32), **args)
    assert optimizer.layout(optimizer.param_groups[0]) is not None


@pytest.mark.parametrize("foreach", [False, True], ids=["per-tensor", "default"])
def test_adamw_without_weight_decay_follows_the_formulas(foreach):
    """The no-decay arrangement (two ``addcdiv``) against the paper's formulas in float64.

    Written as Meta's reference writes them: ``d = g / (sqrt(v / (1 - b2^t)) + eps)``,
    ``z -= lr d``, ``x = (1 - c) x + c z``, ``y = (1 - b1) z + b1 x``; only rounding differs.
    """
    lr, b1, b2, eps, warmup = 0.05, 0.9, 0.99, 1e-8, 3
    gen = torch.Generator().manual_seed(1)
    x0 = torch.randn(37, generator=gen, dtype=torch.float64)
    param = torch.nn.Parameter(x0.clone())
    optimizer = plugtrain.resolve("optimizer", "AdamWScheduleFree")(
        [param], lr=lr, betas=(b1, b2), eps=eps, warmup_steps=warmup, foreach=foreach
    )
    x, z, v = x0.clone(), x0.clone(), torch.zeros_like(x0)
    lr_max, weight_sum = -1.0, 0.0
    for k in range(12):
        t = k + 1
        y = (1 - b1) * z + b1 * x
        torch.testing.assert_close(param.detach(), y, rtol=1e-12, atol=1e-12)
        g = torch.sin(3 * y) + 0.1 * k
        param.grad = g.clone()
        optimizer.step()
        rate = lr * min(1.0, t / warmup)
        lr_max = max(lr_max, rate)
        weight = lr_max**2.0  # r = 0, weight_lr_power = 2 (the defaults)
        weight_sum += weight
        v = b2 * v + (1 - b2) * g * g
        z = z - rate * g / ((v / (1 - b2**t)).sqrt() + eps)
        x = (1 - weight / weight_sum) * x + weight / weight_sum * z
    torch.testing.assert_close(param.detach(), (1 - b1) * z + b1 * x, rtol=1e-12, atol=1e-12)
