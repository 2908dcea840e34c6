"""Each optimizer against a plain float64 transcription of SPEC section 3, one tensor at a time."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

State = dict[str, Any]


def sgd(p, g, s: State, t, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    g = g + weight_decay * p
    if momentum:
        s["buf"] = momentum * s.get("buf", torch.zeros_like(p)) + (1 - dampening) * g
        g = g + momentum * s["buf"] if nesterov else s["buf"]
    return p - lr * g


def adam(
    p,
    g,
    s: State,
    t,
    lr,
    betas=(0.9, 0.999),
    eps=1e-6,
    l2=0.0,
    wd=0.0,
    amsgrad=False,
    correct_bias=True,
    **_,
):
    b1, b2 = betas
    g = g + l2 * p
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    v = s["v"]
    if amsgrad:
        s["vmax"] = v = torch.maximum(s.get("vmax", torch.zeros_like(p)), v)
    update = s["m"] / (v.sqrt() + eps)
    if correct_bias:
        update = update * math.sqrt(1 - b2**t) / (1 - b1**t)
    return p - lr * (update + wd * p)


def adamax(p, g, s: State, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, maximize=False):
    b1, b2 = betas
    g = (-g if maximize else g) + weight_decay * p
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["u"] = torch.maximum(b2 * s.get("u", torch.zeros_like(p)), g.abs() + eps)
    return p - lr / (1 - b1**t) * s["m"] / s["u"]


def adadelta(p, g, s: State, t, lr, rho=0.9, eps=1e-6, weight_decay=0.0):
    g = g + weight_decay * p
    s["sq"] = rho * s.get("sq", 0) + (1 - rho) * g * g
    delta = (s.get("acc", 0) + eps) ** 0.5 / (s["sq"] + eps).sqrt() * g
    s["acc"] = rho * s.get("acc", 0) + (1 - rho) * delta * delta
    return p - lr * delta


def adagrad(
    p, g, s: State, t, lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-6
):
    g = g + weight_decay * p
    s["sum"] = s.get("sum", initial_accumulator_value) + g * g
    return p - lr / (1 + (t - 1) * lr_decay) * g / (s["sum"].sqrt() + eps)


def asgd(p, g, s: State, t, lr, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0):
    g = g + weight_decay * p
    eta, mu = s.get("eta", lr), s.get("mu", 1.0)
    p = p * (1 - lambd * eta) - eta * g
    s["ax"] = s.get("ax", 0) + mu * (p - s.get("ax", 0))
    s["eta"] = lr / (1 + lambd * lr * t) ** alpha
    s["mu"] = 1 / max(1, t - t0)
    return p


def nadam(
    p, g, s: State, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3
):
    b1, b2 = betas
    g = g + weight_decay * p
    mu = b1 * (1 - 0.5 * 0.96 ** (t * momentum_decay))
    mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
    s["prod"] = s.get("prod", 1.0) * mu
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    denom = (s["v"] / (1 - b2**t)).sqrt() + eps
    p = p - lr * (1 - mu) / (1 - s["prod"]) * g / denom
    return p - lr * mu_next / (1 - s["prod"] * mu * mu_next) * s["m"] / denom


def radam(p, g, s: State, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
    b1, b2 = betas
    g = g + weight_decay * p
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    m_hat = s["m"] / (1 - b1**t)
    rho_inf = 2 / (1 - b2) - 1
    rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
    if rho <= 5:
        return p - lr * m_hat
    r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
    return p - lr * r * m_hat * math.sqrt(1 - b2**t) / (s["v"].sqrt() + eps)


def rmsprop(
    p, g, s: State, t, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False
):
    g = g + weight_decay * p
    s["sq"] = alpha * s.get("sq", 0) + (1 - alpha) * g * g
    var = s["sq"]
    if centered:
        s["ga"] = alpha * s.get("ga", 0) + (1 - alpha) * g
        var = var - s["ga"] ** 2
    avg = var.sqrt() + eps
    if momentum:
        s["buf"] = momentum * s.get("buf", 0) + g / avg
        return p - lr * s["buf"]
    return p - lr * g / avg


def rprop(p, g, s: State, t, lr, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0)):
    prev = s.get("prev", torch.zeros_like(p))
    size = s.get("size", torch.full_like(p, lr))
    sign = (g * prev).sign()
    factor = torch.ones_like(p)
    factor[sign > 0] = etas[1]
    factor[sign < 0] = etas[0]
    s["size"] = (size * factor).clamp(*step_sizes)
    g = torch.where(sign < 0, 0.0, g)
    s["prev"] = g
    return p - g.sign() * s["size"]


def lamb(p, g, s: State, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, adam=False):
    b1, b2 = betas
    s["m"] = b1 * s.get("m", 0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0) + (1 - b2) * g * g
    r = s["m"] / (s["v"].sqrt() + eps) + weight_decay * p
    w_norm, r_norm = min(float(p.norm()), 10.0), float(r.norm())
    trust = 1.0 if adam or w_norm == 0 or r_norm == 0 else w_norm / r_norm
    return p - lr * trust * r


def lion(p, g, s: State, t, lr, betas=(0.9, 0.99), weight_decay=0.0):
    m = s.get("m", torch.zeros_like(p))
    p = p * (1 - lr * weight_decay) - lr * (betas[0] * m + (1 - betas[0]) * g).sign()
    s["m"] = betas[1] * m + (1 - betas[1]) * g
    return p


def adafactor(
    p,
    g,
    s: State,
    t,
    lr,
    eps=(1e-30, 1e-3),
    decay_rate=-0.8,
    weight_decay=0.0,
    scale_parameter=True,
):
    rms = lambda x: float(x.pow(2).mean().sqrt())  # noqa: E731
    rho = lr * max(rms(p), eps[1]) if scale_parameter else lr
    beta = 1 - t**decay_rate
    u = g * g + eps[0]
    if p.dim() >= 2:
        s["row"] = beta * s.get("row", 0) + (1 - beta) * u.mean(-1)
        s["col"] = beta * s.get("col", 0) + (1 - beta) * u.mean(-2)
        r = (s["row"] / s["row"].mean(-1, keepdim=True)).rsqrt().unsqueeze(-1)
        update = r * s["col"].rsqrt().unsqueeze(-2) * g
    else:
        s["v"] = beta * s.get("v", 0) + (1 - beta) * u
        update = s["v"].rsqrt() * g
    update = update / max(rms(update), 1.0) * rho
    return p - weight_decay * rho * p - update


def _orthogonalise(x):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon(p, g, s: State, t, lr=0.02, weight_decay=0.01, momentum=0.95, nesterov=True):
    if p.dim() < 2:  # the documented fallback: cstorch AdamW with betas (0.9, 0.95), eps 1e-8
        return adam(p, g, s, t, lr, betas=(0.9, 0.95), eps=1e-8, wd=weight_decay)
    s["buf"] = momentum * s.get("buf", 0) + g
    u = g + momentum * s["buf"] if nesterov else s["buf"]
    rows = p.shape[0]
    ortho = _orthogonalise(u.reshape(rows, -1)).reshape(p.shape)
    p = p * (1 - lr * weight_decay)
    return p - lr * 0.2 * math.sqrt(max(rows, p.numel() // rows)) * ortho


Case = tuple[str, dict[str, Any], Callable[..., torch.Tensor], dict[str, Any]]
CASES: list[Case] = [
    ("SGD", {"lr": 0.1}, sgd, {"lr": 0.1}),
    (
        "SGD",
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.2, "weight_decay": 0.01},
        sgd,
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.2, "weight_decay": 0.01},
    ),
    (
        "SGD",
        {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
        sgd,
        {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
    ),
    ("Adam", {"lr": 0.01, "weight_decay": 0.01}, adam, {"lr": 0.01, "l2": 0.01}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.01, "fused": False}, adam, {"lr": 0.01, "l2": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "fused": True}, adam, {"lr": 0.01, "amsgrad": True}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "fused": True}, adam, {"lr": 0.01, "wd": 0.1}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "fused": False}, adam, {"lr": 0.01, "wd": 0.1}),
    (
        "AdamW",
        {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True},
        adam,
        {"lr": 0.01, "wd": 0.1, "amsgrad": True},
    ),
    (
        "AdamW",
        {"lr": 0.01, "correct_bias": False, "eps": 1e-3},
        adam,
        {"lr": 0.01, "correct_bias": False, "eps": 1e-3},
    ),
    ("Adamax", {"lr": 0.01, "weight_decay": 0.01}, adamax, {"lr": 0.01, "weight_decay": 0.01}),
    ("Adamax", {"lr": 0.01, "maximize": True}, adamax, {"lr": 0.01, "maximize": True}),
    ("Adadelta", {"weight_decay": 0.01}, adadelta, {"lr": 1.0, "weight_decay": 0.01}),
    (
        "Adagrad",
        {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1},
        adagrad,
        {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01, "initial_accumulator_value": 0.1},
    ),
    (
        "ASGD",
        {"lr": 0.05, "lambd": 1e-2, "t0": 10, "weight_decay": 0.01},
        asgd,
        {"lr": 0.05, "lambd": 1e-2, "t0": 10, "weight_decay": 0.01},
    ),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.01}, nadam, {"lr": 0.01, "weight_decay": 0.01}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.01}, radam, {"lr": 0.01, "weight_decay": 0.01}),
    ("RMSprop", {"lr": 0.01, "weight_decay": 0.01}, rmsprop, {"lr": 0.01, "weight_decay": 0.01}),
    (
        "RMSprop",
        {"lr": 0.01, "momentum": 0.9, "centered": True},
        rmsprop,
        {"lr": 0.01, "momentum": 0.9, "centered": True},
    ),
    ("Rprop", {"lr": 0.01}, rprop, {"lr": 0.01}),
    ("Lamb", {"lr": 0.01, "weight_decay": 0.01}, lamb, {"lr": 0.01, "weight_decay": 0.01}),
    ("Lamb", {"lr": 0.01, "adam": True}, lamb, {"lr": 0.01, "adam": True}),
    ("Lion", {"lr": 0.01, "weight_decay": 0.1}, lion, {"lr": 0.01, "weight_decay": 0.1}),
    ("Adafactor", {"lr": 0.1, "weight_decay": 0.01}, adafactor, {"lr": 0.1, "weight_decay": 0.01}),
    (
        "Adafactor",
        {"lr": 0.01, "scale_parameter": False},
        adafactor,
        {"lr": 0.01, "scale_parameter": False},
    ),
    # Newton-Schulz in float32 (float64 parameters: float64) matches the reference to rounding;
    # the bfloat16 default is tested against it below, at bfloat16's accuracy.
    ("Muon", {"ns_dtype": "float32"}, muon, {}),
    (
        "Muon",
        {"lr": 0.01, "nesterov": False, "weight_decay": 0.0, "ns_dtype": "float32"},
        muon,
        {"lr": 0.01, "nesterov": False, "weight_decay": 0.0},
    ),
]


def _reference(initial, grads_at, rule, hp, steps=25):
    params = initial(torch.float64)
    states: dict[str, State] = {name: {} for name in params}
    for step in range(steps):
        grads = grads_at(params, step)
        for name in params:
            params[name] = rule(params[name], grads[name], states[name], step + 1, **hp)
    return params


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "per_tensor"])
@pytest.mark.parametrize(
    ("name", "kwargs", "rule", "hp"), CASES, ids=lambda v: v if isinstance(v, str) else None
)
def test_matches_float64_reference(train, initial, grads_at, name, kwargs, rule, hp, foreach):
    expected = _reference(initial, grads_at, rule, hp)
    got, _ = train(name, {**kwargs, "foreach": foreach})
    for key in expected:
        # Only rounding separates the two: float64 through 25 steps stays within 1e-10.
        torch.testing.assert_close(got[key], expected[key], rtol=1e-9, atol=1e-10, msg=key)
        assert not torch.equal(got[key], initial(torch.float64)[key]), key


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "per_tensor"])
@pytest.mark.parametrize("kwargs", [{}, {"lr": 0.01, "nesterov": False, "weight_decay": 0.0}])
def test_muon_bfloat16_default_follows_the_float64_reference(
    train, initial, grads_at, kwargs, foreach
):
    """The default runs Newton-Schulz in bfloat16: each update is right to about 1 %.

    After 25 steps every tensor (the 1-D fallback ones too: their gradients follow the
    matrices) must sit within 3 % of the distance it moved from the float64 reference.
    """
    expected = _reference(initial, grads_at, muon, kwargs)
    got, opt = train("Muon", {**kwargs, "foreach": foreach})
    assert opt.param_groups[0]["ns_dtype"] == "bfloat16"
    start = initial(torch.float64)
    for key in expected:
        moved = float((expected[key] - start[key]).norm())
        error = float((got[key] - expected[key]).norm())
        assert 0 < error <= 0.03 * moved, (key, error, moved)


def test_adam_scheduled_weight_decay_is_decoupled(train, initial, grads_at):
    """A WD scheduler writing Adam's group weight_decay adds AdamW-style decay to the L2 rate."""
    params = initial(torch.float64)
    opt = None
    for fused in (None, False):
        params = initial(torch.float64)
        for p in params.values():
            p.requires_grad_()
        import plugtrain

        opt = plugtrain.resolve("optimizer", "Adam")(
            list(params.items()), lr=0.01, weight_decay=0.01, fused=fused
        )
        assert opt.param_groups[0]["weight_decay"] == 0.0
        assert opt.param_groups[0]["l2_regularization_rate"] == 0.01
        opt.param_groups[0]["weight_decay"] = torch.tensor(0.05, dtype=torch.float64)
        got, _ = train("Adam", {}, params=params, optimizer=opt)
        expected = _reference(initial, grads_at, adam, {"lr": 0.01, "l2": 0.01, "wd": 0.05})
        for key in expected:
            torch.testing.assert_close(got[key], expected[key], rtol=1e-9, atol=1e-10)
