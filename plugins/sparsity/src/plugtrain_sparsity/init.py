"""The mask initialisations of ``init_method``: random, topk, from_zeros and checkerboard.

Each takes ``(param, sparsity, balance, generator)`` and returns a bool mask of the parameter's
shape; ``random`` draws from the generator the core hands over, so every process and a resumed
run draw alike. A callable ``init_method`` (Python only) is called as cstorch calls it:
``fn(param, sparsity, score_shaper=None, device=None)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from plugtrain_sparsity.masks import Balance, kept_count, topk_mask

__all__ = ["INIT_METHODS", "InitMethod", "make_init_method"]

InitMethod = Callable[[torch.Tensor, float, Balance, torch.Generator], torch.Tensor]


def _by_score(score: torch.Tensor, sparsity: float, balance: Balance) -> torch.Tensor:
    grouped = balance.view(score)
    mask = topk_mask(grouped, kept_count(sparsity, grouped.shape[-1]))
    return balance.unview(mask, score.shape)


def random_init(
    param: torch.Tensor, sparsity: float, balance: Balance, generator: torch.Generator
) -> torch.Tensor:
    """Exactly ``trunc((1 - s) * n)`` kept (per balance group), chosen uniformly at random."""
    score = torch.rand(param.shape, generator=generator, device=generator.device)
    return _by_score(score.to(param.device), sparsity, balance)


def topk_init(
    param: torch.Tensor, sparsity: float, balance: Balance, generator: torch.Generator
) -> torch.Tensor:
    """The largest-magnitude weights kept."""
    return _by_score(param.detach().abs(), sparsity, balance)


def from_zeros_init(
    param: torch.Tensor, sparsity: float, balance: Balance, generator: torch.Generator
) -> torch.Tensor:
    """Kept where the weight is not zero (the level is ignored)."""
    return param.detach() != 0


def checkerboard_init(
    param: torch.Tensor, sparsity: float, balance: Balance, generator: torch.Generator
) -> torch.Tensor:
    """Evenly spread and deterministic, density ``d = 1 - s`` along the last dimension.

    Position ``j`` is kept when ``floor((j+1)d + 1e-5) != floor(jd + 1e-5)``; row ``r`` (of
    the weight seen as ``[rows, last dim]``) is rolled by ``-r * floor(1/d - 1e-5)``.
    """
    density = 1.0 - sparsity
    if density <= 0:
        return torch.zeros_like(param, dtype=torch.bool)
    columns = param.shape[-1] if param.dim() else 1
    rows = param.numel() // max(columns, 1)
    line = torch.tensor(
        [
            math.floor((j + 1) * density + 1e-5) != math.floor(j * density + 1e-5)
            for j in range(columns)
        ],
        dtype=torch.bool,
    )
    shift = math.floor(1 / density - 1e-5)
    board = torch.stack([torch.roll(line, -r * shift) for r in range(rows)])
    return board.reshape(param.shape).to(param.device)


INIT_METHODS: dict[str, InitMethod] = {
    "random": random_init,
    "topk": topk_init,
    "from_zeros": from_zeros_init,
    "checkerboard": checkerboard_init,
}
"""The built-in ``init_method`` values (exact case)."""


def _from_callable(function: Callable[..., Any]) -> InitMethod:
    def init(
        param: torch.Tensor, sparsity: float, balance: Balance, generator: torch.Generator
    ) -> torch.Tensor:
        shaper = balance if balance.groups > 1 else None
        mask = function(param, sparsity, score_shaper=shaper, device=param.device)
        return torch.as_tensor(mask, dtype=torch.bool, device=param.device)

    return init


def make_init_method(value: Any) -> InitMethod:
    """The init method ``value`` names, or a callable one wrapped.

    :raises ValueError: for an unknown name, listing the valid ones.
    """
    if isinstance(value, str) and value in INIT_METHODS:
        return INIT_METHODS[value]
    if callable(value) and not isinstance(value, str):
        return _from_callable(value)
    signature = "(param, sparsity, score_shaper=None, device=None) -> torch.Tensor"
    message = (
        f'Unknown `init_method`: "{value}". Valid options are one of the built-in '
        f"{list(INIT_METHODS)} or a function with signature {signature}."
    )
    raise ValueError(message)
