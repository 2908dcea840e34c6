"""``RigL``: drop the smallest weights, regrow where the dense gradient is largest."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_sparsity.masks import Balance
from plugtrain_sparsity.set import SET

__all__ = ["RigL"]


class RigL(SET):
    """Rigging the Lottery: SET with regrowth by ``|unmasked gradient|``.

    The gradient is the one of the whole step (summed over micro-batches and processes).

    :param balance_in_groups: split each ``[out, in]`` weight's input columns into this many
        equal groups, sparsified alike (2-D weights only).
    :param balance_out_groups: split the output rows into this many groups.
    Other arguments: see :class:`~plugtrain_sparsity.set.SET`.
    :raises ValueError: for both balance keys, or a parameter without a dimension that is a
        multiple of the groups (every parameter is checked; cstorch checks only the first).
    """

    needs_gradients = True

    def __init__(
        self,
        params: Any,
        sparsity: Any,
        init_method: Any = "random",
        update: Any = None,
        drop_fraction: Any = 0.3,
        balance_in_groups: int | None = None,
        balance_out_groups: int | None = None,
    ) -> None:
        if balance_in_groups is not None and balance_out_groups is not None:
            message = (
                "Only one of `balance_in_groups` and `balance_out_groups` can be specified at "
                "a time."
            )
            raise ValueError(message)
        super().__init__(params, sparsity, init_method, update, drop_fraction)
        self._balances: dict[str, Balance] = {}
        for name, param in self.params:
            self._balances[name] = _balance(name, param, balance_in_groups, balance_out_groups)

    def balance(self, name: str, param: torch.Tensor) -> Balance:
        """The balance groups of ``name``."""
        return self._balances.get(name, Balance())

    def grow_score(
        self, param: torch.Tensor, gradient: torch.Tensor | None, generator: torch.Generator
    ) -> torch.Tensor:
        """Where to regrow: the magnitude of the unmasked gradient."""
        if gradient is None:
            return torch.zeros_like(param)
        return gradient.abs()


def _balance(
    name: str, param: torch.Tensor, in_groups: int | None, out_groups: int | None
) -> Balance:
    groups = in_groups or out_groups
    if groups is None:
        return Balance()
    key = "balance_in_groups" if in_groups is not None else "balance_out_groups"
    if in_groups is not None and param.dim() != 2:
        message = (
            f"Sparsity group configured with `{key}`={groups} but parameter {name} is not 2-D: "
            f"{param.shape}"
        )
        raise ValueError(message)
    if not any(size % groups == 0 for size in param.shape):
        message = (
            f"Sparsity group configured with `{key}`={groups} but parameter {name} does not "
            f"have a dimension with a multiple of {groups}: {param.shape}"
        )
        raise ValueError(message)
    return Balance(groups, transpose=in_groups is not None)
