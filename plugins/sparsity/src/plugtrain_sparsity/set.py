"""``SET``: drop the smallest weights, regrow as many at random positions."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain.hyperparams import HyperParameterSchedule, make_schedule
from plugtrain_sparsity.dynamic import DynamicSparsity
from plugtrain_sparsity.masks import Balance, kept_count, topk_mask

__all__ = ["SET", "drop_and_grow"]


def drop_and_grow(
    weight: torch.Tensor,
    mask: torch.Tensor,
    grow_score: torch.Tensor,
    sparsity: float,
    drop_fraction: float,
    balance: Balance,
) -> torch.Tensor:
    """SET's and RigL's mask update (per balance group).

    Keep the ``trunc((1 - df) * nnz)`` largest ``|w|`` among the kept positions, then add the
    ``max(0, trunc((1 - s) * n) - keep)`` positions of highest ``grow_score`` among the rest
    (just-dropped positions included), so the count returns to the target.
    """
    shape = weight.shape
    kept = balance.view(mask)
    groups, size = kept.shape
    nnz_per_group = int(kept.sum()) / groups
    keep = int((1.0 - drop_fraction) * nnz_per_group)
    magnitude = balance.view(weight.detach().abs().to(torch.float32))
    kept_now = topk_mask(torch.where(kept, magnitude, -1.0), keep)
    score = balance.view(grow_score.to(torch.float32))
    grown = topk_mask(torch.where(kept_now, -1.0, score), max(0, kept_count(sparsity, size) - keep))
    return balance.unview(kept_now | grown, shape)


class SET(DynamicSparsity):
    """Sparse Evolutionary Training: regrowth at uniformly random positions.

    :param drop_fraction: the fraction of kept weights dropped at each update (a number, a
        list or a schedule mapping; default 0.3). Other arguments: see
        :class:`~plugtrain_sparsity.dynamic.DynamicSparsity`.
    """

    def __init__(
        self,
        params: Any,
        sparsity: Any,
        init_method: Any = "random",
        update: Any = None,
        drop_fraction: Any = 0.3,
    ) -> None:
        super().__init__(params, sparsity, init_method, update)
        self.drop_fraction = make_schedule(drop_fraction)

    def schedules(self) -> dict[str, HyperParameterSchedule]:
        """The sparsity and drop-fraction schedules."""
        return {"sparsity": self.sparsity, "drop_fraction": self.drop_fraction}

    def grow_score(
        self, param: torch.Tensor, gradient: torch.Tensor | None, generator: torch.Generator
    ) -> torch.Tensor:
        """Where to regrow: uniform random scores."""
        score = torch.rand(param.shape, generator=generator, device=generator.device)
        return score.to(param.device)

    def update_mask(
        self,
        name: str,
        param: torch.Tensor,
        mask: torch.Tensor,
        sparsity: float,
        gradient: torch.Tensor | None,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """Drop by magnitude, grow by :meth:`grow_score`."""
        drop_fraction = float(self.drop_fraction(self.step))
        score = self.grow_score(param, gradient, generator)
        return drop_and_grow(param, mask, score, sparsity, drop_fraction, self.balance(name, param))
