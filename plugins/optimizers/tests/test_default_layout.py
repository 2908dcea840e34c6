"""The default layout (``flat=None``) flattens only where nothing observable changes.

Every optimizer on its default path gives the numbers of the unflattened path (``flat=False``)
over many small tensors of odd shapes, two dtypes, parameters without gradients, masked
parameters and a resume from ``state_dict()``: bit for bit, except for :data:`ROUNDING`, whose
flat path sums or rounds in another order (measured: at most 4.1 ulps of a tensor's largest
element after 8 steps; :data:`ULPS` allowed).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
import torch

import plugtrain
from plugtrain.testing import distribution_names
from plugtrain_optimizers._auto_flat import flatten_by_default, sole_tenant

# The cstorch-numerics optimizers; Schedule-Free (its own numerics, no flat layout, train/eval
# modes) is tested against its formulas in test_schedule_free.py.
ALL = [
    name
    for name in distribution_names("plugtrain-optimizers", "optimizer")
    if not name.endswith("ScheduleFree")
]
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
    "Muon": {"ns_dtype": "float32"},
}
# Odd sizes, so that some elements fall outside whole SIMD vectors in either layout.
SHAPES = [(7, 13), (5,), (3, 4, 5), (31,), (9, 9), (1, 17), (6, 11), (2,), (12, 3), (4, 4, 4)]
ROUNDING = {
    "Adam": "torch's fused kernel: the vectorised body and the scalar remainder round apart",
    "AdamW": "the same",
    "RAdam": "the same (once rectified)",
    "SGD": "the same",
    "Lamb": "norms as row reductions over runs of equal-sized tensors",
    "Adafactor": "statistics of same-shaped matrices stacked into one batch",
}
ULPS = 8
NO_GRAD = 3  # index of a parameter that never gets a gradient
MASKED = 0  # index of a parameter whose gradient, value and state are masked


def _params(dtypes: tuple[torch.dtype, ...]) -> list[torch.nn.Parameter]:
    """Each shape three times in a row (runs of equal sizes), the dtypes taking turns by halves."""
    gen = torch.Generator().manual_seed(0)
    params = []
    shapes = [shape for shape in SHAPES for _ in range(3)]
    for i, shape in enumerate(shapes):
        dtype = dtypes[i * len(dtypes) // len(shapes)]
        data = 0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)
        params.append(torch.nn.Parameter(data.to(dtype)))
    return params


def _mask() -> torch.Tensor:
    return torch.rand(SHAPES[MASKED], generator=torch.Generator().manual_seed(3)) > 0.4


def _loss(params: list[torch.nn.Parameter], step: int, skip: int | None = NO_GRAD) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for i, p in enumerate(params):
        if i == skip:
            continue
        weight = 1.0 + 0.1 * ((i + step) % 5)
        total = total + (weight * torch.tanh(p.double() + 0.3)).pow(2).sum() / p.numel()
    return total


def _masked(opt: Any, params: list[torch.nn.Parameter]) -> None:
    """Mask one parameter's value and parameter-shaped state, as sparse training does."""
    p = params[MASKED]
    factor = _mask().to(p.dtype)
    p.detach().mul_(factor)
    for value in opt.state[p].values():
        if isinstance(value, torch.Tensor) and value.shape == p.shape:
            value.mul_(factor)


def _run(
    name: str,
    kwargs: dict[str, Any],
    *,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
    steps: int = 8,
    start: int = 0,
    params: list[torch.nn.Parameter] | None = None,
    opt: Any = None,
    set_to_none: bool = True,
    skip: int | None = NO_GRAD,
) -> tuple[list[torch.Tensor], Any, list[torch.nn.Parameter]]:
    params = params if params is not None else _params(dtypes)
    if opt is None:
        mask = _mask()
        params[MASKED].register_hook(lambda g: g * mask.to(g.dtype))
        opt = plugtrain.resolve("optimizer", name)(params, **EVERY_FEATURE[name], **kwargs)
    for step in range(start, start + steps):
        opt.zero_grad(set_to_none=set_to_none)
        _loss(params, step, skip).backward()
        opt.step()
        _masked(opt, params)
    return [p.detach().clone() for p in params], opt, params


def _assert_same(got: list[torch.Tensor], expected: list[torch.Tensor], ulps: int = 0) -> None:
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.dtype == b.dtype
        message = f"parameter {i} {tuple(a.shape)}: {(a - b).abs().max()}"
        if ulps == 0:
            assert torch.equal(a, b), message
        else:
            bound = ulps * torch.finfo(b.dtype).eps * b.abs().clamp_min(b.abs().max())
            assert bool(((a - b).abs() <= bound).all()), message


CASES = {
    "float32, every param with a gradient": {"dtypes": (torch.float32,), "skip": None},
    "float32 and float64, one without": {"dtypes": (torch.float32, torch.float64)},
    "the same, zero_grad(set_to_none=False)": {
        "dtypes": (torch.float32, torch.float64),
        "set_to_none": False,
    },
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ALL)
def test_default_path_equals_the_unflattened_path_bitwise(name, case):
    default, default_opt, default_params = _run(name, {}, **CASES[case])
    plain, plain_opt, plain_params = _run(name, {"flat": False}, **CASES[case])
    ulps = ULPS if name in ROUNDING else 0
    _assert_same(default, plain, ulps)
    for p, q in zip(default_params, plain_params, strict=True):
        assert sorted(default_opt.state[p]) == sorted(plain_opt.state[q])
        tensors = [k for k, v in plain_opt.state[q].items() if isinstance(v, torch.Tensor)]
        _assert_same(
            [default_opt.state[p][k] for k in tensors],
            [plain_opt.state[q][k] for k in tensors],
            ulps,
        )


FLAT_BY_DEFAULT = {"ASGD", "Adadelta", "Adafactor", "Adamax", "Lamb", "Lion", "NAdam", "Rprop"}


@pytest.mark.parametrize("name", ALL)
def test_the_default_flattens_small_groups_where_it_pays(name):
    _, opt, params = _run(name, {}, steps=1)
    layout = opt._layouts[0]
    assert opt.flat_by_default == (name in FLAT_BY_DEFAULT)
    if name not in FLAT_BY_DEFAULT:
        assert layout is None
        return
    assert layout is not None
    storages = {p.untyped_storage().data_ptr() for p in params if p.dtype == torch.float32}
    assert len(storages) == 1


@pytest.mark.parametrize("name", ["AdamW", "Lamb", "Rprop", "NAdam"])
def test_a_parameter_without_gradient_is_not_stepped(name):
    _, opt, params = _run(name, {}, steps=3)
    p = params[NO_GRAD]
    assert p.grad is None
    untouched = _params((torch.float32, torch.float64))[NO_GRAD]
    assert torch.equal(p.detach(), untouched.detach())
    fresh = plugtrain.resolve("optimizer", name)([untouched], **EVERY_FEATURE[name])
    for key, value in fresh.state[untouched].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(opt.state[p][key], value), key


def test_zero_grad_keeps_torch_semantics():
    params = _params((torch.float32,))
    opt = plugtrain.optim.Lion(params)
    assert opt._layouts[0] is not None
    assert all(p.grad is None for p in params)
    _loss(params, 0).backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    assert params[NO_GRAD].grad is None
    assert all(bool((p.grad == 0).all()) for i, p in enumerate(params) if i != NO_GRAD)
    opt.zero_grad()
    assert all(p.grad is None for p in params)


def _shared_view(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return params[1].view(-1)


def _data_alias(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return params[2].data


def _slice_of_one_buffer(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    buffer = torch.zeros(sum(p.numel() for p in params))
    out, offset = [], 0
    for p in params:
        out.append(torch.nn.Parameter(buffer[offset : offset + p.numel()].view(p.shape)))
        offset += p.numel()
    return out


@pytest.mark.parametrize("alias", [_shared_view, _data_alias])
def test_aliased_parameters_are_not_moved(alias: Callable[..., torch.Tensor]):
    params = _params((torch.float32,))
    held = alias(params)
    opt = plugtrain.optim.Lamb(params, lr=0.1)
    assert opt._layouts[0] is None
    _loss(params, 0).backward()
    opt.step()
    assert held.data_ptr() in {p.data_ptr() for p in params}


def test_what_the_default_flattens():
    small = _params((torch.float32,))
    assert flatten_by_default(small)
    assert not flatten_by_default(small[:1])  # one tensor: nothing to gain
    assert not flatten_by_default([torch.nn.Parameter(torch.zeros(600, 600)) for _ in range(2)])
    assert not flatten_by_default(_slice_of_one_buffer(small))
    assert not sole_tenant(torch.zeros(4, 4).t())
    assert sole_tenant(torch.zeros(4, 4))


def _saved(opt: Any) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    return buffer


@pytest.mark.parametrize("resumed_as", [{}, {"flat": False}])
@pytest.mark.parametrize("name", ["AdamW", "Lamb", "Lion", "Rprop", "Adafactor", "NAdam"])
def test_resume_from_state_dict_continues_bitwise(name, resumed_as):
    straight, _, _ = _run(name, {}, steps=8)
    halfway, opt, _ = _run(name, {}, steps=4)
    params = [torch.nn.Parameter(t.clone()) for t in halfway]
    mask = _mask()
    params[MASKED].register_hook(lambda g: g * mask.to(g.dtype))
    resumed_opt = plugtrain.resolve("optimizer", name)(params, **EVERY_FEATURE[name], **resumed_as)
    resumed_opt.load_state_dict(torch.load(_saved(opt)))
    resumed, _, _ = _run(name, {}, steps=4, start=4, params=params, opt=resumed_opt)
    _assert_same(resumed, straight, ULPS if name in ROUNDING and resumed_as else 0)
