"""``GMP``: gradual magnitude pruning to a scheduled level."""

from __future__ import annotations

from typing import Any

import torch

from plugtrain_sparsity.dynamic import DynamicSparsity
from plugtrain_sparsity.masks import kept_count, topk_mask

__all__ = ["GMP"]


class GMP(DynamicSparsity):
    """At each update step keep the ``trunc((1 - s) * n)`` largest-magnitude weights.

    Pruned weights are zero, so they do not come back while the level does not decrease. See
    :class:`~plugtrain_sparsity.dynamic.DynamicSparsity` for the arguments.

    :raises ValueError: for a constant level (use ``static``).
    """

    def __init__(
        self,
        params: Any,
        sparsity: Any,
        init_method: Any = "random",
        update: Any = None,
    ) -> None:
        if isinstance(sparsity, int | float) and not isinstance(sparsity, bool):
            message = (
                f"Configured with constant sparsity {sparsity}. This is not valid, because the "
                "sparsity pattern would not change during training. For a static sparsity "
                'pattern, use `algorithm="static".`'
            )
            raise ValueError(message)  # noqa: TRY004 - cstorch's exception
        super().__init__(params, sparsity, init_method, update)

    def update_mask(
        self,
        name: str,
        param: torch.Tensor,
        mask: torch.Tensor,
        sparsity: float,
        gradient: torch.Tensor | None,
        generator: torch.Generator,
    ) -> torch.Tensor:
        """Top-k of ``|w|`` over the whole tensor."""
        score = param.detach().abs().reshape(1, -1)
        return topk_mask(score, kept_count(sparsity, score.shape[-1])).reshape(param.shape)
