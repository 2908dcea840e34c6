"""Shared fixtures: a small fixed model (as named tensors), fixed data, and a training loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import plugtrain

SHAPES = {
    "fc1.weight": (8, 5),
    "fc1.bias": (8,),
    "fc2.weight": (3, 8),
    "fc2.bias": (3,),
    "mix.weight": (2, 4, 5),
}


def _initial(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        name: (0.5 * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
        for name, shape in SHAPES.items()
    }


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 5, generator=gen, dtype=torch.float64)
    y = torch.randn(16, 3, generator=gen, dtype=torch.float64)
    return x, y


def _loss(params: dict[str, torch.Tensor], step: int) -> torch.Tensor:
    x, y = _data()
    x = x.to(params["fc1.weight"].dtype) * (1 + 0.1 * (step % 3))
    y = y.to(x.dtype)
    hidden = torch.tanh(x @ params["fc1.weight"].T + params["fc1.bias"])
    out = hidden @ params["fc2.weight"].T + params["fc2.bias"]
    extra = torch.tanh(x @ params["mix.weight"].sum(0).T).pow(2).mean()
    return (out - y).pow(2).mean() + extra


def _grads(params: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
    leaves = {k: v.detach().clone().requires_grad_() for k, v in params.items()}
    _loss(leaves, step).backward()
    return {k: v.grad for k, v in leaves.items()}  # type: ignore[misc]


@pytest.fixture
def initial() -> Callable[[torch.dtype], dict[str, torch.Tensor]]:
    """``initial(dtype)``: fresh copies of the model's starting parameters."""
    return _initial


@pytest.fixture
def grads_at() -> Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]]:
    """``grads_at(params, step)``: the loss gradient at ``params`` (the data varies with step)."""
    return _grads


@pytest.fixture
def train() -> Callable[..., tuple[dict[str, torch.Tensor], Any]]:
    """``train(name, kwargs, dtype=, steps=, start=, params=, optimizer=)`` -> (params, opt).

    Builds the optimizer through ``plugtrain.resolve`` from ``(name, tensor)`` pairs and takes
    ``steps`` steps; ``start`` offsets the step number that selects the data.
    """

    def run(
        name: str,
        kwargs: dict[str, Any],
        *,
        dtype: torch.dtype = torch.float64,
        steps: int = 25,
        start: int = 0,
        params: dict[str, torch.Tensor] | None = None,
        optimizer: Any = None,
    ) -> tuple[dict[str, torch.Tensor], Any]:
        params = params if params is not None else _initial(dtype)
        for p in params.values():
            p.requires_grad_()
        if optimizer is None:
            optimizer = plugtrain.resolve("optimizer", name)(list(params.items()), **kwargs)
        for step in range(start, start + steps):
            optimizer.zero_grad()
            _loss(params, step).backward()
            optimizer.step()
        return {k: v.detach() for k, v in params.items()}, optimizer

    return run


@pytest.fixture
def native_kernels_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Steps take the multi-tensor path: the one-pass C kernels are turned off."""
    from plugtrain_optimizers import _native

    monkeypatch.setenv(_native.SWITCH_VARIABLE, "0")
    _native.reset()
    yield
    monkeypatch.delenv(_native.SWITCH_VARIABLE)
    _native.reset()
