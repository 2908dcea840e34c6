"""Schedule-Free AdamW and SGD against a hand-written loop of the paper's formulas.

Defazio et al. 2024 (and Meta's ``schedulefree``), written out per step ``t = k + 1``::

    lr_t   = lr * min(1, t / warmup_steps)          lr_max = max(lr_max, lr_t)
    w_t    = t**r * lr_max**weight_lr_power         c_t = w_t / sum(w_1..w_t)
    y_t    = (1 - beta) z_t + beta x_t              (the parameters hold y during training)
    AdamW: v = b2 v + (1 - b2) g^2 ; d = g / (sqrt(v / (1 - b2^t)) + eps) + wd y
    SGD:   d = g + wd y
    z_{t+1} = z_t - lr_t d ;  x_{t+1} = (1 - c_t) x_t + c_t z_{t+1}

``eval()`` shows ``x``; ``train()`` shows ``y``.
"""

from __future__ import annotations

import math

import pytest
import torch

import plugtrain


def _grad(y: torch.Tensor, step: int) -> torch.Tensor:
    """A fixed gradient field: the gradient of a quadratic, plus a step-dependent push."""
    return 2.0 * (y - torch.linspace(-1, 1, y.numel(), dtype=y.dtype)) + 0.1 * math.sin(step)


def _reference(kind: str, args: dict, x0: torch.Tensor, steps: int) -> tuple:
    """``(x, y)`` after ``steps`` steps, straight from the formulas above."""
    beta = args["betas"][0] if kind == "adamw" else args["momentum"]
    x, z = x0.clone(), x0.clone()
    v = torch.zeros_like(x0)
    lr_max, weight_sum = -1.0, 0.0
    for k in range(steps):
        t = k + 1
        y = (1 - beta) * z + beta * x
        g = _grad(y, k)
        lr = args["lr"] * (t / args["warmup_steps"] if k < args["warmup_steps"] else 1.0)
        lr_max = max(lr_max, lr)
        w = t ** args["r"] * lr_max ** args["weight_lr_power"]
        weight_sum += w
        c = w / weight_sum
        if kind == "adamw":
            b2 = args["betas"][1]
            v = b2 * v + (1 - b2) * g * g
            d = g / ((v / (1 - b2**t)).sqrt() + args["eps"]) + args["weight_decay"] * y
        else:
            d = g + args["weight_decay"] * y
        z = z - lr * d
        x = (1 - c) * x + c * z
    return x, (1 - beta) * z + beta * x


CASES = {
    "AdamWScheduleFree": (
        "adamw",
        {
            "lr": 0.05,
            "betas": (0.9, 0.99),
            "eps": 1e-8,
            "weight_decay": 0.01,
            "warmup_steps": 3,
            "r": 0.5,
            "weight_lr_power": 2.0,
        },
    ),
    "SGDScheduleFree": (
        "sgd",
        {
            "lr": 0.05,
            "momentum": 0.8,
            "weight_decay": 0.01,
            "warmup_steps": 3,
            "r": 1.0,
            "weight_lr_power": 2.0,
        },
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_free_follows_the_formulas(name):
    kind, args = CASES[name]
    x0 = torch.linspace(0.5, -0.3, 7, dtype=torch.float64)
    param = torch.nn.Parameter(x0.clone())
    optimizer = plugtrain.resolve("optimizer", name)([param], **args)
    optimizer.train()
    steps = 12
    for k in range(steps):
        param.grad = _grad(param.detach(), k)
        optimizer.step()
    want_x, want_y = _reference(kind, args, x0, steps)
    torch.testing.assert_close(param.detach(), want_y, rtol=1e-12, atol=1e-12)
    optimizer.eval()
    optimizer.eval()  # idempotent
    torch.testing.assert_close(param.detach(), want_x, rtol=1e-12, atol=1e-12)
    # the mode travels in the state: a copy loaded in eval() mode goes back to y on train()
    twin = torch.nn.Parameter(param.detach().clone())
    copy = plugtrain.resolve("optimizer", name)([twin], **args)
    copy.load_state_dict(optimizer.state_dict())
    copy.train()
    torch.testing.assert_close(twin.detach(), want_y, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match=r"train\(\) first"):
        optimizer.step()
