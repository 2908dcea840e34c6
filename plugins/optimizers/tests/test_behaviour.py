"""Paths agree, torch.optim agrees where SPEC says so, dtypes, state, hyperparameters."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import plugtrain
from plugtrain.testing import distribution_names
from plugtrain_optimizers import muon as muon_module
from plugtrain_optimizers.muon import newton_schulz

# The cstorch-numerics optimizers; Schedule-Free (its own numerics, no flat layout, train/eval
# modes) is tested against its formulas in test_schedule_free.py.
ALL = [
    name
    for name in distribution_names("plugtrain-optimizers", "optimizer")
    if not name.endswith("ScheduleFree")
]
SMALL = {"SGD": {"lr": 0.1, "momentum": 0.9}, "Adafactor": {"lr": 0.05}}
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


def test_every_optimizer_is_covered():
    assert sorted(EVERY_FEATURE) == sorted(ALL)
    assert len(ALL) == 15


@pytest.mark.parametrize("name", ALL)
def test_per_tensor_path_agrees_with_multi_tensor_path(train, name):
    kwargs = EVERY_FEATURE[name]
    many, _ = train(name, {**kwargs, "foreach": True}, dtype=torch.float32)
    one, _ = train(name, {**kwargs, "foreach": False}, dtype=torch.float32)
    for key in many:
        torch.testing.assert_close(many[key], one[key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_fused_kernel_agrees_with_multi_tensor_path(train, name, amsgrad):
    kwargs = {"lr": 0.01, "weight_decay": 0.05, "amsgrad": amsgrad}
    fused, _ = train(name, {**kwargs, "fused": True}, dtype=torch.float32)
    plain, _ = train(name, {**kwargs, "fused": False}, dtype=torch.float32)
    for key in fused:
        torch.testing.assert_close(fused[key], plain[key], rtol=1e-5, atol=1e-6, msg=key)


TORCH_EQUIVALENTS = [
    ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True}, "SGD", {}),
    # With eps = 0 cstorch's eps placement and torch's coincide.
    ("Adam", {"lr": 0.01, "eps": 0.0, "weight_decay": 0.01}, "Adam", {}),
    ("AdamW", {"lr": 0.01, "eps": 0.0, "weight_decay": 0.1, "amsgrad": True}, "AdamW", {}),
    ("Adamax", {"lr": 0.01, "weight_decay": 0.01}, "Adamax", {"eps": 1e-6}),
    ("Adadelta", {"weight_decay": 0.01}, "Adadelta", {"lr": 1.0, "eps": 1e-6}),
    ("Adagrad", {"lr_decay": 0.01, "initial_accumulator_value": 0.1}, "Adagrad", {"eps": 1e-6}),
    ("ASGD", {"t0": 5, "lambd": 1e-2}, "ASGD", {}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.01}, "RAdam", {"eps": 1e-6}),
    ("RMSprop", {"momentum": 0.5, "centered": True}, "RMSprop", {}),
    ("Rprop", {"lr": 0.01}, "Rprop", {}),
]


@pytest.mark.parametrize(("name", "kwargs", "torch_name", "extra"), TORCH_EQUIVALENTS)
def test_matches_torch_optim_where_the_rules_coincide(
    train, initial, name, kwargs, torch_name, extra
):
    ours, _ = train(name, kwargs)
    params = initial(torch.float64)
    reference = getattr(torch.optim, torch_name)(
        list(params.values()), **{"lr": 0.01, **kwargs, **extra, "foreach": False}
    )
    theirs, _ = train(name, {}, params=params, optimizer=reference)
    for key in ours:
        # ASGD: torch rounds eta to a float32 tensor; everything else differs only in rounding.
        tolerance = 1e-6 if name == "ASGD" else 1e-9
        torch.testing.assert_close(ours[key], theirs[key], rtol=tolerance, atol=1e-10, msg=key)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ALL)
def test_lower_precisions_follow_the_float64_run(train, name, dtype):
    kwargs = EVERY_FEATURE[name]
    exact, _ = train(name, kwargs, steps=5)
    got, opt = train(name, kwargs, dtype=dtype, steps=5)
    for key, value in got.items():
        assert value.dtype == dtype
        for state_key, state_value in opt.state[opt.param_groups[0]["params"][0]].items():
            if isinstance(state_value, torch.Tensor) and state_key != "step":
                assert state_value.dtype == dtype, state_key
        # bfloat16 keeps 8 bits of mantissa: ~1e-2 relative per step is all it can do.
        tol = 1e-4 if dtype == torch.float32 else 5e-2
        torch.testing.assert_close(value.double(), exact[key], rtol=tol, atol=tol, msg=key)


@pytest.mark.parametrize("name", ALL)
def test_state_is_complete_before_the_first_step(initial, name):
    params = initial(torch.float32)
    opt = plugtrain.resolve("optimizer", name)(list(params.values()), **SMALL.get(name, {}))
    state = opt.state_dict()["state"]
    assert sorted(state) == list(range(len(params)))
    first = opt.state_dict()
    train_keys = {k for s in state.values() for k in s}
    assert train_keys or name in ("SGD",)
    assert first["param_groups"][0]["params"] == list(range(len(params)))


@pytest.mark.parametrize("name", ALL)
def test_resuming_from_a_saved_state_continues_bit_for_bit(train, initial, name):
    kwargs = EVERY_FEATURE[name]
    straight, _ = train(name, kwargs, dtype=torch.float32, steps=12)
    halfway, opt = train(name, kwargs, dtype=torch.float32, steps=6)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    params = {k: v.clone() for k, v in halfway.items()}
    for p in params.values():
        p.requires_grad_()
    resumed_opt = plugtrain.resolve("optimizer", name)(list(params.items()), **kwargs)
    resumed_opt.load_state_dict(torch.load(buffer))
    resumed, _ = train(name, kwargs, steps=6, start=6, params=params, optimizer=resumed_opt)
    for key in straight:
        assert torch.equal(straight[key], resumed[key]), key


@pytest.mark.parametrize("name", ALL)
def test_tensor_hyperparameters_give_the_same_numbers(train, initial, name):
    """Schedulers may write 0-dim tensors into groups; the result must not change."""
    kwargs = EVERY_FEATURE[name]
    plain, _ = train(name, kwargs)
    params = initial(torch.float64)
    for p in params.values():
        p.requires_grad_()
    opt = plugtrain.resolve("optimizer", name)(list(params.items()), **kwargs)
    for group in opt.param_groups:
        for key in ("lr", "weight_decay", "momentum", "eps"):
            if isinstance(group.get(key), float):
                group[key] = torch.tensor(group[key], dtype=torch.float64)
    tensor, _ = train(name, kwargs, params=params, optimizer=opt)
    for key in plain:
        torch.testing.assert_close(tensor[key], plain[key], rtol=1e-12, atol=1e-14)


def test_params_may_be_tensors_pairs_or_groups(initial):
    params = initial(torch.float32)
    adamw = plugtrain.resolve("optimizer", "AdamW")
    assert len(adamw(list(params.values())).param_groups) == 1
    named = adamw(list(params.items()))
    assert named.param_groups[0]["param_names"] == list(params)
    groups = adamw(
        [
            {"params": [params["fc1.weight"]], "tags": {"a"}},
            {"params": [params["fc1.bias"]], "weight_decay": 0.0, "lr": 0.1},
        ],
        weight_decay=0.1,
    )
    assert [g["weight_decay"] for g in groups.param_groups] == [0.1, 0.0]
    assert groups.param_groups[0]["tags"] == {"a"}


def test_lr_and_learning_rate_are_aliases(initial):
    params = list(initial(torch.float32).values())
    sgd = plugtrain.resolve("optimizer", "SGD")
    assert sgd(params, learning_rate=0.5).param_groups[0]["lr"] == 0.5
    assert plugtrain.optim.Adam(params, learning_rate=0.5).param_groups[0]["lr"] == 0.5
    with pytest.raises(ValueError, match="name the same argument"):
        sgd(params, lr=0.1, learning_rate=0.5)


def test_defaults_are_cstorch_defaults(initial):
    params = list(initial(torch.float32).values())
    defaults = {
        "Adam": {"eps": 1e-6, "betas": (0.9, 0.999), "lr": 1e-3},
        "AdamW": {"eps": 1e-6, "correct_bias": True},
        "NAdam": {"eps": 1e-8, "lr": 2e-3, "momentum_decay": 4e-3},
        "Lion": {"lr": 1e-4, "betas": (0.9, 0.99)},
        "Muon": {"lr": 0.02, "weight_decay": 0.01, "momentum": 0.95, "ns_steps": 5},
        "ASGD": {"t0": 1e6, "lambd": 1e-4, "alpha": 0.75},
        "Adadelta": {"lr": 1.0, "rho": 0.9, "eps": 1e-6},
    }
    for name, expected in defaults.items():
        group = plugtrain.resolve("optimizer", name)(params).param_groups[0]
        for key, value in expected.items():
            assert group[key] == value, (name, key)


def test_adam_moves_weight_decay_into_the_l2_rate(initial):
    opt = plugtrain.optim.Adam(
        [{"params": [initial(torch.float32)["fc1.bias"]], "weight_decay": 0.2}], weight_decay=0.1
    )
    group = opt.param_groups[0]
    assert (group["l2_regularization_rate"], group["weight_decay"]) == (0.2, 0.0)


def test_muon_steps_on_cpu_and_lowers_the_loss(train, initial, grads_at):
    params, _ = train("Muon", {"lr": 0.01}, dtype=torch.float32, steps=25)
    start = initial(torch.float32)
    before = sum(g.pow(2).sum() for g in grads_at(start, 0).values())
    after = sum(g.pow(2).sum() for g in grads_at(params, 0).values())
    assert after < before


def test_muon_bfloat16_newton_schulz_agrees_with_float32(train, initial, grads_at):
    gen = torch.Generator().manual_seed(0)
    for shape in [(3, 16, 32), (2, 64, 16)]:
        stack = torch.randn(shape, generator=gen)
        exact = newton_schulz(stack, 5)
        fast = newton_schulz(stack, 5, torch.bfloat16)
        assert fast.dtype == torch.bfloat16
        # bfloat16 keeps 8 bits of mantissa: ~1 % relative error on the orthogonalised update.
        assert float((fast.float() - exact).norm() / exact.norm()) < 0.03
    ref, _ = train("Muon", {"lr": 0.01, "ns_dtype": "float32"}, dtype=torch.float32, steps=3)
    got, opt = train("Muon", {"lr": 0.01, "ns_dtype": "bfloat16"}, dtype=torch.float32, steps=3)
    start = initial(torch.float32)
    for key, value in got.items():
        assert value.dtype == torch.float32
        moved = (ref[key] - start[key]).norm()
        assert float((value - ref[key]).norm()) <= 0.03 * float(moved), key
    # ... and it still trains.
    params, _ = train("Muon", {"lr": 0.01, "ns_dtype": "bfloat16"}, dtype=torch.float32)
    before = sum(g.pow(2).sum() for g in grads_at(start, 0).values())
    after = sum(g.pow(2).sum() for g in grads_at(params, 0).values())
    assert after < before
    assert opt.param_groups[0]["ns_dtype"] == "bfloat16"


def test_emulated_bfloat16_products_equal_native_ones(monkeypatch):
    """Where bfloat16 matmuls are slow, float32 products of bfloat16 values rounded to bfloat16
    stand in for them: the same numbers up to float32 summation order (1 bfloat16 ulp)."""
    gen = torch.Generator().manual_seed(0)
    stack = torch.randn(3, 24, 40, generator=gen)
    results = {}
    for native in (True, False):
        monkeypatch.setattr(muon_module, "native_bfloat16_matmul", lambda _t, n=native: n)
        results[native] = [newton_schulz(stack, steps, torch.bfloat16) for steps in (1, 5)]
    for steps, native, emulated in zip((1, 5), results[True], results[False], strict=True):
        assert native.dtype == emulated.dtype == torch.bfloat16
        ulp = 2.0**-7 * native.float().abs().clamp_min(2.0**-20)
        differ = (native.float() - emulated.float()).abs()
        if steps == 1:
            assert bool((differ <= ulp).all()), float((differ / ulp).max())
            assert float((differ == 0).float().mean()) > 0.9
        else:
            # Five iterations carry the rare 1-ulp differences on: still far below bf16's 1 %.
            relative = float((native.float() - emulated.float()).norm() / native.float().norm())
            assert relative < 5e-3, relative


def test_a_deep_copy_of_an_optimizer_steps_on_its_own(initial):
    params = list(initial(torch.float32).values())
    opt = plugtrain.optim.Lion(params)
    assert copy.deepcopy(opt.state_dict())["param_groups"][0]["lr"] == 1e-4
