"""Tests of acme-plugtrain-adan; they run once the distribution is installed, else skip.

From the plugtrain repository: ``pytest examples/acme-plugtrain-adan/tests`` (after
``pip install examples/acme-plugtrain-adan``); ``tests/integration/test_third_party_plugin.py``
installs it into a temporary directory and runs this file there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest

pytest.importorskip("acme_plugtrain_adan", reason="acme-plugtrain-adan is not installed")
torch = pytest.importorskip("torch")

# imported after the skips, so that a missing plugin skips cleanly
from acme_plugtrain_adan.adan import Adan  # noqa: E402

import plugtrain  # noqa: E402
from plugtrain.testing import (  # noqa: E402
    assert_plugin_contract,
    assert_plugin_installed,
    check_optimizer,
)

Vector = list[float]

# Shapes of the parameters every test optimizes: a matrix, a vector and a scalar.
SHAPES = ((3, 2), (4,), ())
STEPS = 25


# -- an independent reference ---------------------------------------------------------------


def objective_gradient(theta: Vector, scale: Vector) -> Vector:
    """Gradient of ``sum(scale * theta**2 / 2 + sin(3 * theta))``: smooth, not quadratic."""
    return [a * t + 3.0 * math.cos(3.0 * t) for t, a in zip(theta, scale, strict=True)]


def paper_adan(
    theta: Vector,
    scale: Vector,
    *,
    steps: int,
    lr: float,
    betas: tuple[float, float, float],
    eps: float,
    weight_decay: float,
    no_prox: bool,
) -> Vector:
    """Algorithm 1 of Xie et al. (2022) in plain Python floats, with the authors' bias correction.

    The paper writes the decay rates as ``1 - beta`` and the update with ``beta`` as weights of
    the new terms; here ``b = 1 - beta_paper`` as in the optimizer's arguments.
    """
    beta1_paper, beta2_paper, beta3_paper = (1.0 - b for b in betas)
    size = len(theta)
    theta = list(theta)
    m, v, n = [0.0] * size, [0.0] * size, [0.0] * size
    previous: Vector | None = None
    for k in range(1, steps + 1):
        g = objective_gradient(theta, scale)
        previous = g if previous is None else previous  # g_0 := g_1, so v_1 = 0
        for i in range(size):
            diff = g[i] - previous[i]
            m[i] = (1 - beta1_paper) * m[i] + beta1_paper * g[i]
            v[i] = (1 - beta2_paper) * v[i] + beta2_paper * diff
            nesterov = g[i] + (1 - beta2_paper) * diff
            n[i] = (1 - beta3_paper) * n[i] + beta3_paper * nesterov**2
            m_hat = m[i] / (1 - (1 - beta1_paper) ** k)
            v_hat = v[i] / (1 - (1 - beta2_paper) ** k)
            n_hat = n[i] / (1 - (1 - beta3_paper) ** k)
            eta = lr / (math.sqrt(n_hat) + eps)
            update = eta * (m_hat + (1 - beta2_paper) * v_hat)
            if no_prox:
                theta[i] = (1 - lr * weight_decay) * theta[i] - update
            else:
                theta[i] = (theta[i] - update) / (1 + lr * weight_decay)
        previous = g
    return theta


# -- helpers --------------------------------------------------------------------------------


def initial_values() -> list[Vector]:
    """Fixed starting points, one list per parameter of ``SHAPES``."""
    values = []
    start = 0.3
    for shape in SHAPES:
        count = math.prod(shape)
        values.append([start + 0.37 * j * (-1) ** j for j in range(count)])
        start -= 0.55
    return values


def scales() -> list[Vector]:
    """Curvature per element, different for each parameter."""
    return [[0.5 + 0.25 * j for j in range(math.prod(shape))] for shape in SHAPES]


def make_params(dtype: torch.dtype) -> list[torch.Tensor]:
    return [
        torch.tensor(values, dtype=dtype).reshape(shape).requires_grad_()
        for values, shape in zip(initial_values(), SHAPES, strict=True)
    ]


def set_gradients(params: Sequence[torch.Tensor]) -> None:
    for p, scale in zip(params, scales(), strict=True):
        a = torch.tensor(scale, dtype=p.dtype).reshape(p.shape)
        p.grad = (a * p + 3.0 * torch.cos(3.0 * p)).detach()


def run(
    make: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
    dtype: torch.dtype = torch.float64,
    steps: int = STEPS,
) -> list[torch.Tensor]:
    params = make_params(dtype)
    optimizer = make(params)
    for _ in range(steps):
        set_gradients(params)
        optimizer.step()
    return [p.detach() for p in params]


SETTINGS = [
    pytest.param({}, id="defaults"),
    pytest.param({"lr": 0.05, "weight_decay": 0.1}, id="proximal-decay"),
    pytest.param({"lr": 0.05, "weight_decay": 0.1, "no_prox": True}, id="no-prox"),
    pytest.param({"lr": 0.02, "betas": (0.9, 0.5, 0.95), "eps": 1e-3}, id="other-betas"),
]


# -- the numerics ---------------------------------------------------------------------------


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("settings", SETTINGS)
def test_matches_the_papers_algorithm_in_float64(settings: dict, foreach: bool) -> None:
    """25 steps of the torch optimizer equal the plain-Python Algorithm 1 to rounding."""
    got = run(lambda ps: Adan(ps, foreach=foreach, **settings))
    arguments = {
        "lr": 1e-3,
        "betas": (0.98, 0.92, 0.99),
        "eps": 1e-8,
        "weight_decay": 0.0,
        "no_prox": False,
        **settings,
    }
    for tensor, start, scale in zip(got, initial_values(), scales(), strict=True):
        expected = paper_adan(start, scale, steps=STEPS, **arguments)
        torch.testing.assert_close(
            tensor.flatten(),
            torch.tensor(expected, dtype=torch.float64),
            rtol=1e-12,
            atol=1e-12,
        )
    # the parameters did move: the comparison is not between two unchanged starts
    assert not torch.allclose(got[0].flatten(), torch.tensor(initial_values()[0]).double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("settings", SETTINGS)
def test_foreach_and_per_tensor_paths_agree(settings: dict, dtype: torch.dtype) -> None:
    single = run(lambda ps: Adan(ps, foreach=False, **settings), dtype)
    multi = run(lambda ps: Adan(ps, foreach=True, **settings), dtype)
    for a, b in zip(single, multi, strict=True):
        assert a.dtype == dtype
        torch.testing.assert_close(a, b)


def test_float32_follows_float64() -> None:
    settings = {"lr": 0.05, "weight_decay": 0.1}
    low = run(lambda ps: Adan(ps, **settings), torch.float32)
    high = run(lambda ps: Adan(ps, **settings), torch.float64)
    for a, b in zip(low, high, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


def test_mixed_dtypes_in_one_group_take_the_foreach_path() -> None:
    """Tensors of different dtypes are updated in separate multi-tensor runs."""

    def mixed(dtype_of_first: torch.dtype, foreach: bool) -> list[torch.Tensor]:
        params = make_params(torch.float64)
        params[0] = params[0].detach().to(dtype_of_first).requires_grad_()
        optimizer = Adan(params, lr=0.05, foreach=foreach)
        for _ in range(5):
            set_gradients(params)
            optimizer.step()
        return [p.detach() for p in params]

    for a, b in zip(mixed(torch.float32, False), mixed(torch.float32, True), strict=True):
        torch.testing.assert_close(a, b)


def test_parameters_without_gradient_are_left_alone() -> None:
    params = make_params(torch.float64)
    optimizer = Adan(params, lr=0.1, weight_decay=0.1)
    before = params[1].detach().clone()
    set_gradients(params)
    params[1].grad = None
    optimizer.step()
    assert torch.equal(params[1].detach(), before)
    assert optimizer.state[params[1]]["step"].item() == 0
    assert optimizer.state[params[0]]["step"].item() == 1


# -- state ----------------------------------------------------------------------------------


def test_state_exists_from_construction() -> None:
    params = make_params(torch.float32)
    optimizer = Adan(params)
    saved = optimizer.state_dict()
    assert len(saved["state"]) == len(params)
    for index, p in enumerate(params):
        state = saved["state"][index]
        assert set(state) == {"step", "exp_avg", "exp_avg_diff", "exp_avg_sq", "neg_pre_grad"}
        assert state["exp_avg"].shape == p.shape
        assert state["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize("foreach", [False, True])
def test_state_dict_round_trip_continues_exactly(foreach: bool) -> None:
    """Saving after 10 steps and loading into a new optimizer gives the uninterrupted result."""
    settings = {"lr": 0.05, "weight_decay": 0.1, "foreach": foreach}
    straight = run(lambda ps: Adan(ps, **settings), steps=20)

    params = make_params(torch.float64)
    first = Adan(params, **settings)
    for _ in range(10):
        set_gradients(params)
        first.step()
    saved = first.state_dict()
    resumed_params = [p.detach().clone().requires_grad_() for p in params]
    second = Adan(resumed_params, **settings)
    second.load_state_dict(saved)
    for _ in range(10):
        set_gradients(resumed_params)
        second.step()
    for a, b in zip(straight, resumed_params, strict=True):
        torch.testing.assert_close(a, b.detach(), rtol=0, atol=0)


# -- arguments ------------------------------------------------------------------------------


def test_learning_rate_is_an_alias_of_lr() -> None:
    params = make_params(torch.float32)
    assert Adan(params, learning_rate=0.25).defaults["lr"] == 0.25
    assert Adan(params).defaults["lr"] == 1e-3
    assert Adan(params, lr=1e-3).defaults["lr"] == 1e-3


def test_bad_arguments_are_all_reported() -> None:
    params = make_params(torch.float32)
    with pytest.raises(plugtrain.ConfigError) as raised:
        Adan(params, lr=-1.0, betas=(0.9, 1.0, 0.9), eps=-1.0, momentum=0.9)
    message = str(raised.value)
    for expected in ("Adan.lr", "Adan.betas", "Adan.eps", "Adan.momentum"):
        assert expected in message


def test_lr_and_learning_rate_together_are_an_error() -> None:
    with pytest.raises(plugtrain.ConfigError, match="name the same argument"):
        Adan(make_params(torch.float32), lr=0.1, learning_rate=0.1)


def test_integer_parameters_are_rejected() -> None:
    with pytest.raises(TypeError, match="real floating-point"):
        Adan([torch.zeros(3, dtype=torch.int64)])


def test_sparse_gradients_are_rejected() -> None:
    p = torch.zeros(3, requires_grad=True)
    optimizer = Adan([p])
    p.grad = torch.zeros(3).to_sparse()
    with pytest.raises(RuntimeError, match="sparse"):
        optimizer.step()


def test_closure_is_called_and_its_loss_returned() -> None:
    p = torch.ones(2, requires_grad=True)
    optimizer = Adan([p], lr=0.1)

    def closure() -> float:
        optimizer.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss.item()

    assert optimizer.step(closure) == 2.0
    assert torch.all(p.detach() < 1.0)


# -- as a plugin ----------------------------------------------------------------------------


@pytest.mark.parametrize("foreach", [True, False])
def test_conformance_kit(foreach: bool) -> None:
    # plugtrain's behavioural checks: resume through a weights-only checkpoint, per-group
    # values, frozen parameters, dtypes, layouts, add_param_group, closure, foreach against
    # per-tensor, determinism, descent on a convex loss
    report = check_optimizer(Adan, {"lr": 0.01, "foreach": foreach})
    assert report.outcome("foreach_agrees") == "passed"


def test_plugin_is_installed(installed_registry: plugtrain.Registry) -> None:
    assert_plugin_installed("acme-plugtrain-adan", installed_registry)


def test_plugin_contract(installed_registry: plugtrain.Registry) -> None:
    """Adan resolves, imports, and its signature matches its schema; plugin.py is torch-free."""
    assert_plugin_contract("acme-plugtrain-adan", installed_registry)


def test_resolves_by_name_and_trains(installed_registry: plugtrain.Registry) -> None:
    optimizer_class = installed_registry.resolve("optimizer", "Adan")
    assert optimizer_class is Adan
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    inputs = torch.randn(32, 4)
    targets = inputs @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    optimizer = optimizer_class(model.parameters(), lr=0.1)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]


def test_describe_shows_provider_and_arguments(installed_registry: plugtrain.Registry) -> None:
    info = installed_registry.describe("optimizer", "Adan")
    assert info.distribution == "acme-plugtrain-adan"
    assert [a.name for a in info.arguments] == [
        "lr",
        "betas",
        "eps",
        "weight_decay",
        "no_prox",
        "foreach",
    ]
    lr = info.arguments[0]
    assert lr.aliases == ("learning_rate",)
    assert lr.default == 1e-3
